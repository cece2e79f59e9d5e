// The live training view of a `%%hvd` cell (anywidget ESM, bundled in the Python package: no CDN).
// The kernel sends incremental "update" messages: new log lines, new curve points (float64 buffers), the
// status. They are kept per model (a Store), so every view of the widget, even one created later, draws
// the same data. Drawing is coalesced to one frame per animation tick.

const SMOOTHING = 0.8; // the same debiased EMA as the static copy (static_plot.py)
const COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"];
const PALETTE = [
  "#3e424d", "#e75c58", "#00a250", "#ddb62b", "#208ffb", "#d160c4", "#60c6c8", "#c5c1b4",
  "#282c36", "#b22b31", "#007427", "#b27d12", "#0065ca", "#a03196", "#258f8f", "#a1a6b2",
];

// ---- ANSI ---------------------------------------------------------------------------------------------------

export function escapeHtml(text) {
  return text.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}

function colour256(n) {
  if (n < 16) return PALETTE[n];
  if (n >= 232) {
    const v = 8 + (n - 232) * 10;
    return `rgb(${v},${v},${v})`;
  }
  const i = n - 16;
  const level = (k) => (k === 0 ? 0 : 55 + k * 40);
  return `rgb(${level(Math.floor(i / 36))},${level(Math.floor(i / 6) % 6)},${level(i % 6)})`;
}

function applySgr(style, params) {
  const codes = params === "" ? [0] : params.split(";").map((p) => Number(p || 0));
  for (let i = 0; i < codes.length; i++) {
    const c = codes[i];
    if (c === 0) Object.assign(style, { fg: null, bg: null, bold: false, italic: false, underline: false });
    else if (c === 1) style.bold = true;
    else if (c === 3) style.italic = true;
    else if (c === 4) style.underline = true;
    else if (c === 22) style.bold = false;
    else if (c === 23) style.italic = false;
    else if (c === 24) style.underline = false;
    else if (c >= 30 && c <= 37) style.fg = PALETTE[c - 30];
    else if (c >= 90 && c <= 97) style.fg = PALETTE[c - 90 + 8];
    else if (c === 39) style.fg = null;
    else if (c >= 40 && c <= 47) style.bg = PALETTE[c - 40];
    else if (c >= 100 && c <= 107) style.bg = PALETTE[c - 100 + 8];
    else if (c === 49) style.bg = null;
    else if ((c === 38 || c === 48) && codes[i + 1] === 5) {
      style[c === 38 ? "fg" : "bg"] = colour256(codes[i + 2] ?? 0);
      i += 2;
    } else if ((c === 38 || c === 48) && codes[i + 1] === 2) {
      style[c === 38 ? "fg" : "bg"] = `rgb(${codes[i + 2] ?? 0},${codes[i + 3] ?? 0},${codes[i + 4] ?? 0})`;
      i += 4;
    }
  }
}

/** Text with ANSI colour codes as HTML spans; other escape sequences (cursor moves) are dropped. */
export function ansiToHtml(text) {
  const style = { fg: null, bg: null, bold: false, italic: false, underline: false };
  const re = /\x1b\[([0-9;?]*)([A-Za-z])|\x1b[()][A-Za-z0-9]|\x1b[=>]/g;
  let out = "";
  let last = 0;
  const emit = (chunk) => {
    if (!chunk) return;
    const css = [];
    if (style.fg) css.push(`color:${style.fg}`);
    if (style.bg) css.push(`background-color:${style.bg}`);
    if (style.bold) css.push("font-weight:bold");
    if (style.italic) css.push("font-style:italic");
    if (style.underline) css.push("text-decoration:underline");
    out += css.length ? `<span style="${css.join(";")}">${escapeHtml(chunk)}</span>` : escapeHtml(chunk);
  };
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    emit(text.slice(last, m.index));
    if (m[2] === "m") applySgr(style, m[1]);
    last = re.lastIndex;
  }
  emit(text.slice(last));
  return out;
}

// ---- log ----------------------------------------------------------------------------------------------------

/** The last `maxLines` finished lines, the lines still being written (progress bars), and the total count. */
export class LogModel {
  constructor(maxLines) {
    this.maxLines = maxLines;
    this.lines = []; // [text, stream]
    this.partials = [];
    this.total = 0;
  }

  /** Apply a delta from the kernel; returns what a view must change: {reset, appended, removed}. */
  apply(delta, reset = false) {
    let removed = 0;
    if (reset) this.lines = [];
    for (const line of delta.append) this.lines.push(line);
    if (this.lines.length > this.maxLines) {
      removed = this.lines.length - this.maxLines;
      this.lines.splice(0, removed);
    }
    this.partials = delta.partials;
    this.total = delta.total;
    return { reset, appended: Math.min(delta.append.length, this.lines.length), removed };
  }

  get dropped() {
    return Math.max(0, this.total - this.lines.length);
  }
}

function lineElement(doc, [text, stream]) {
  const div = doc.createElement("div");
  div.className = stream === "stderr" ? "jhvd-line jhvd-stderr" : "jhvd-line";
  div.innerHTML = ansiToHtml(text) || "&#8203;";
  return div;
}

/** The log's DOM: appends and removes line elements; never re-renders the whole log. */
export class LogView {
  constructor(el, model) {
    const doc = el.ownerDocument;
    this.model = model;
    this.root = doc.createElement("div");
    this.root.className = "jhvd-log";
    this.droppedEl = doc.createElement("div");
    this.droppedEl.className = "jhvd-log-dropped";
    this.linesEl = doc.createElement("div");
    this.linesEl.className = "jhvd-log-lines";
    this.partialsEl = doc.createElement("div");
    this.partialsEl.className = "jhvd-log-partials";
    this.root.append(this.droppedEl, this.linesEl, this.partialsEl);
    el.appendChild(this.root);
    this.update({ reset: true });
  }

  update(change) {
    const doc = this.root.ownerDocument;
    const stick = this.root.scrollHeight - this.root.scrollTop - this.root.clientHeight < 24;
    const lines = this.model.lines;
    if (change.reset || change.removed >= this.linesEl.childElementCount) {
      this.linesEl.replaceChildren(...lines.map((l) => lineElement(doc, l)));
    } else {
      for (let i = 0; i < change.removed; i++) this.linesEl.firstElementChild?.remove();
      const frag = doc.createDocumentFragment();
      for (const line of lines.slice(lines.length - change.appended)) frag.appendChild(lineElement(doc, line));
      this.linesEl.appendChild(frag);
      while (this.linesEl.childElementCount > lines.length) this.linesEl.firstElementChild.remove();
    }
    // Progress bars: one element per bar, rewritten in place.
    const partials = this.model.partials;
    while (this.partialsEl.childElementCount > partials.length) this.partialsEl.lastElementChild.remove();
    partials.forEach((p, i) => {
      const old = this.partialsEl.children[i];
      const fresh = lineElement(doc, p);
      fresh.classList.add("jhvd-partial");
      if (old) old.replaceWith(fresh);
      else this.partialsEl.appendChild(fresh);
    });
    const dropped = this.model.dropped;
    this.droppedEl.textContent = dropped
      ? `… ${dropped.toLocaleString("en-US")} earlier line${dropped === 1 ? "" : "s"} not shown (--log-lines)`
      : "";
    this.droppedEl.style.display = dropped ? "" : "none";
    this.root.style.display = lines.length || partials.length ? "" : "none";
    if (stick) this.root.scrollTop = this.root.scrollHeight;
  }
}

// ---- curves -------------------------------------------------------------------------------------------------

/** Whether metric `name` belongs in the plot for `pattern` (`loss` matches `val_loss`), as in curves.py. */
export function plotMatches(pattern, name) {
  const p = pattern.trim().toLowerCase();
  return name === p || name.split("_").some((w) => w.startsWith(p));
}

function grow(arr, need) {
  if (need <= arr.length) return arr;
  const next = new Float64Array(Math.max(need, arr.length * 2, 64));
  next.set(arr);
  return next;
}

/** Points per metric in growable float64 arrays, with the smoothed curve kept up to date as points arrive. */
export class SeriesStore {
  constructor(smoothing = SMOOTHING) {
    this.smoothing = smoothing;
    this.series = new Map();
  }

  /** Append points that start at index `start`; returns false when points are missing (a gap). */
  apply(name, start, reset, xs, ys) {
    let s = this.series.get(name);
    if (!s || reset) {
      s = { name, n: 0, x: new Float64Array(64), y: new Float64Array(64), sm: new Float64Array(64), ema: 0, k: 0 };
      this.series.set(name, s);
    }
    if (start > s.n) return false;
    const skip = s.n - start; // points already here (a repeated message)
    const add = xs.length - skip;
    if (add <= 0) return true;
    s.x = grow(s.x, s.n + add);
    s.y = grow(s.y, s.n + add);
    s.sm = grow(s.sm, s.n + add);
    const w = this.smoothing;
    for (let i = skip; i < xs.length; i++) {
      const y = ys[i];
      s.x[s.n] = xs[i];
      s.y[s.n] = y;
      if (Number.isFinite(y)) {
        s.k += 1;
        s.ema = s.ema * w + (1 - w) * y;
        s.sm[s.n] = s.ema / (1 - w ** s.k);
      } else {
        s.sm[s.n] = y;
      }
      s.n += 1;
    }
    return true;
  }

  matching(pattern) {
    return [...this.series.values()].filter((s) => plotMatches(pattern, s.name));
  }
}

/** Debiased exponential moving average (TensorBoard's smoothing). */
export function smooth(ys, weight = SMOOTHING) {
  const out = [];
  let ema = 0;
  let k = 0;
  for (const y of ys) {
    if (!Number.isFinite(y)) {
      out.push(y);
      continue;
    }
    k += 1;
    ema = ema * weight + (1 - weight) * y;
    out.push(ema / (1 - weight ** k));
  }
  return out;
}

/** Index of the point whose x is nearest to `x` among the first `n` (x increasing). */
export function nearestIndex(xs, n, x) {
  if (n === 0) return -1;
  let lo = 0;
  let hi = n - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (xs[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  if (lo > 0 && Math.abs(xs[lo - 1] - x) <= Math.abs(xs[lo] - x)) return lo - 1;
  return lo;
}

/** Indices to draw for points with x in [x0, x1] on `width` pixels: every point, or min and max per column. */
export function decimate(xs, ys, n, x0, x1, width) {
  let a = nearestIndex(xs, n, x0);
  let b = nearestIndex(xs, n, x1);
  if (a < 0) return [];
  a = Math.max(0, a - 1);
  b = Math.min(n - 1, b + 1);
  if (b - a + 1 <= width * 2) return Array.from({ length: b - a + 1 }, (_, i) => a + i);
  const out = [];
  let col = -1;
  let lo = -1;
  let hi = -1;
  const flush = () => {
    if (lo < 0) return;
    if (lo === hi) out.push(lo);
    else out.push(Math.min(lo, hi), Math.max(lo, hi));
  };
  for (let i = a; i <= b; i++) {
    const c = Math.floor(((xs[i] - x0) / (x1 - x0 || 1)) * width);
    if (c !== col) {
      flush();
      col = c;
      lo = hi = -1;
    }
    if (!Number.isFinite(ys[i])) continue;
    if (lo < 0 || ys[i] < ys[lo]) lo = i;
    if (hi < 0 || ys[i] > ys[hi]) hi = i;
  }
  flush();
  return out;
}

/** About `count` round tick values covering [min, max]. */
export function niceTicks(min, max, count = 5) {
  if (!(max > min)) return [min];
  const raw = (max - min) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw);
  const ticks = [];
  for (let t = Math.ceil(min / step) * step; t <= max + step * 1e-9; t += step) ticks.push(+t.toPrecision(12));
  return ticks;
}

export function formatNumber(v) {
  if (!Number.isFinite(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(2);
  return +v.toPrecision(4) + "";
}

const MARGIN = { left: 52, right: 12, top: 20, bottom: 22 };

/** One plot panel: raw and smoothed curves of the metrics matching `pattern`; drag to zoom, double-click to
 * reset, hover for the values at a step. Follows new points until the user zooms. */
export class PlotPanel {
  constructor(el, store, pattern, height = 200) {
    const doc = el.ownerDocument;
    this.store = store;
    this.pattern = pattern;
    this.height = height;
    this.zoom = null; // [x0, x1] while zoomed
    this.hoverX = null;
    this.drag = null;
    this.root = doc.createElement("div");
    this.root.className = "jhvd-plot";
    this.canvas = doc.createElement("canvas");
    this.readout = doc.createElement("div");
    this.readout.className = "jhvd-readout";
    this.root.append(this.canvas, this.readout);
    el.appendChild(this.root);
    this.canvas.addEventListener("mousedown", (e) => {
      this.drag = { from: this.xAt(e.offsetX), to: null };
    });
    this.canvas.addEventListener("mousemove", (e) => {
      this.hoverX = this.xAt(e.offsetX);
      if (this.drag) this.drag.to = this.hoverX;
      this.draw();
    });
    this.canvas.addEventListener("mouseup", () => {
      const d = this.drag;
      this.drag = null;
      if (d && d.to !== null && Math.abs(d.to - d.from) > 0) this.zoom = [Math.min(d.from, d.to), Math.max(d.from, d.to)];
      this.draw();
    });
    this.canvas.addEventListener("mouseleave", () => {
      this.hoverX = null;
      this.drag = null;
      this.draw();
    });
    this.canvas.addEventListener("dblclick", () => {
      this.zoom = null;
      this.draw();
    });
  }

  get width() {
    return Math.max(200, this.root.clientWidth || 600);
  }

  /** The x range drawn: the zoom, else every point of the panel's curves. */
  xRange() {
    if (this.zoom) return this.zoom;
    let x0 = Infinity;
    let x1 = -Infinity;
    for (const s of this.store.matching(this.pattern)) {
      if (!s.n) continue;
      x0 = Math.min(x0, s.x[0]);
      x1 = Math.max(x1, s.x[s.n - 1]);
    }
    if (!Number.isFinite(x0)) return [0, 1];
    return x1 > x0 ? [x0, x1] : [x0 - 0.5, x0 + 0.5];
  }

  xAt(px) {
    const [x0, x1] = this.xRange();
    const w = this.width - MARGIN.left - MARGIN.right;
    return x0 + ((px - MARGIN.left) / w) * (x1 - x0);
  }

  /** Number of points drawn per curve (for tests and the title). */
  pointCounts() {
    return Object.fromEntries(this.store.matching(this.pattern).map((s) => [s.name, s.n]));
  }

  draw() {
    const series = this.store.matching(this.pattern).filter((s) => s.n > 0);
    this.root.dataset.points = String(series.reduce((a, s) => a + s.n, 0));
    const dpr = globalThis.devicePixelRatio || 1;
    const width = this.width;
    const height = this.height;
    if (this.canvas.width !== Math.round(width * dpr)) {
      this.canvas.width = Math.round(width * dpr);
      this.canvas.height = Math.round(height * dpr);
      this.canvas.style.width = `${width}px`;
      this.canvas.style.height = `${height}px`;
    }
    const ctx = this.canvas.getContext && this.canvas.getContext("2d");
    if (!ctx) return;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = "11px sans-serif";
    ctx.fillStyle = "#555";
    ctx.fillText(this.pattern + (this.zoom ? "  (zoomed: double-click to reset)" : ""), MARGIN.left, 13);
    if (!series.length) {
      ctx.fillText("waiting for values…", MARGIN.left + 4, height / 2);
      this.readout.textContent = "";
      return;
    }
    const [x0, x1] = this.xRange();
    const plotW = width - MARGIN.left - MARGIN.right;
    const plotH = height - MARGIN.top - MARGIN.bottom;
    const picks = series.map((s) => decimate(s.x, s.y, s.n, x0, x1, plotW));
    let y0 = Infinity;
    let y1 = -Infinity;
    series.forEach((s, k) => {
      for (const i of picks[k]) {
        if (s.x[i] < x0 || s.x[i] > x1) continue;
        for (const v of [s.y[i], s.sm[i]]) {
          if (Number.isFinite(v)) {
            y0 = Math.min(y0, v);
            y1 = Math.max(y1, v);
          }
        }
      }
    });
    if (!Number.isFinite(y0)) [y0, y1] = [0, 1];
    if (y1 === y0) [y0, y1] = [y0 - 0.5, y1 + 0.5];
    const pad = (y1 - y0) * 0.05;
    y0 -= pad;
    y1 += pad;
    const sx = (x) => MARGIN.left + ((x - x0) / (x1 - x0)) * plotW;
    const sy = (y) => MARGIN.top + (1 - (y - y0) / (y1 - y0)) * plotH;
    // Axes and grid.
    ctx.strokeStyle = "#e3e3e3";
    ctx.lineWidth = 1;
    ctx.fillStyle = "#666";
    ctx.textAlign = "right";
    for (const t of niceTicks(y0, y1, 4)) {
      ctx.beginPath();
      ctx.moveTo(MARGIN.left, sy(t));
      ctx.lineTo(width - MARGIN.right, sy(t));
      ctx.stroke();
      ctx.fillText(formatNumber(t), MARGIN.left - 4, sy(t) + 3);
    }
    ctx.textAlign = "center";
    for (const t of niceTicks(x0, x1, 6)) ctx.fillText(formatNumber(t), sx(t), height - 6);
    ctx.textAlign = "left";
    // Curves: raw faint, smoothed solid; clipped to the plot area.
    ctx.save();
    ctx.beginPath();
    ctx.rect(MARGIN.left, MARGIN.top, plotW, plotH);
    ctx.clip();
    series.forEach((s, k) => {
      const colour = COLOURS[k % COLOURS.length];
      for (const [values, alpha, lw] of [
        [s.y, 0.3, 1],
        [s.sm, 1, 1.6],
      ]) {
        ctx.globalAlpha = alpha;
        ctx.strokeStyle = colour;
        ctx.lineWidth = lw;
        ctx.beginPath();
        let pen = false;
        for (const i of picks[k]) {
          const v = values[i];
          if (!Number.isFinite(v)) {
            pen = false;
            continue;
          }
          if (pen) ctx.lineTo(sx(s.x[i]), sy(v));
          else ctx.moveTo(sx(s.x[i]), sy(v));
          pen = true;
        }
        ctx.stroke();
      }
    });
    ctx.globalAlpha = 1;
    if (this.drag && this.drag.to !== null) {
      ctx.fillStyle = "rgba(31,119,180,0.12)";
      const a = sx(Math.min(this.drag.from, this.drag.to));
      ctx.fillRect(a, MARGIN.top, sx(Math.max(this.drag.from, this.drag.to)) - a, plotH);
    }
    ctx.restore();
    // Legend and hover readout.
    series.forEach((s, k) => {
      ctx.fillStyle = COLOURS[k % COLOURS.length];
      ctx.textAlign = "right";
      ctx.fillText(`${s.name} ${formatNumber(s.y[s.n - 1])}`, width - MARGIN.right, MARGIN.top + 12 + 13 * k);
    });
    ctx.textAlign = "left";
    this.readout.textContent = this.hoverX === null ? "" : this.readoutText(this.hoverX);
    if (this.hoverX !== null && this.hoverX >= x0 && this.hoverX <= x1) {
      ctx.strokeStyle = "#999";
      ctx.beginPath();
      ctx.moveTo(sx(this.hoverX), MARGIN.top);
      ctx.lineTo(sx(this.hoverX), MARGIN.top + plotH);
      ctx.stroke();
    }
  }

  /** `step 120 · loss 0.41 (smoothed 0.44)` for the points nearest to x. */
  readoutText(x) {
    const parts = [];
    let at = null;
    for (const s of this.store.matching(this.pattern)) {
      const i = nearestIndex(s.x, s.n, x);
      if (i < 0) continue;
      at = at ?? s.x[i];
      parts.push(`${s.name} ${formatNumber(s.y[i])} (smoothed ${formatNumber(s.sm[i])})`);
    }
    return at === null ? "" : [`step ${formatNumber(at)}`, ...parts].join(" · ");
  }
}

// ---- status -------------------------------------------------------------------------------------------------

export function formatDuration(seconds) {
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const pad = (v) => String(v).padStart(2, "0");
  return h ? `${h}:${pad(m)}:${pad(s % 60)}` : `${m}:${pad(s % 60)}`;
}

/** The status line: state, ranks, step, samples/s, elapsed, ETA. `elapsed` is the current elapsed time. */
export function formatStatus(status, elapsed) {
  if (!status) return "";
  const state = { running: "● running", done: "✓ finished", failed: "✗ stopped" }[status.state] ?? status.state;
  const bits = [state, `${status.ranks} rank${status.ranks === 1 ? "" : "s"}`];
  if (status.step !== null && status.step !== undefined)
    bits.push(`step ${formatNumber(status.step)}${status.total ? `/${status.total}` : ""}`);
  if (status.samples_per_s) bits.push(`${Math.round(status.samples_per_s).toLocaleString("en-US")} samples/s`);
  else if (status.steps_per_s) bits.push(`${formatNumber(status.steps_per_s)} steps/s`);
  bits.push(`${formatDuration(elapsed)} elapsed`);
  if (status.state === "running" && status.eta !== null && status.eta !== undefined)
    bits.push(`ETA ${formatDuration(status.eta)}`);
  if (status.warning) bits.push(`⚠ ${status.warning}`);
  if (status.straggler) bits.push(status.straggler);
  return bits.join(" · ");
}

// ---- the widget ---------------------------------------------------------------------------------------------

function float64(buffer) {
  // Front ends hand buffers over as ArrayBuffers or as views whose offset may not be 8-aligned: copy.
  if (buffer instanceof ArrayBuffer) return new Float64Array(buffer.slice(0));
  return new Float64Array(buffer.buffer.slice(buffer.byteOffset, buffer.byteOffset + buffer.byteLength));
}

/** Everything one widget model has received; views subscribe to it. */
export class Store {
  constructor(logLines) {
    this.log = new LogModel(logLines);
    this.series = new SeriesStore();
    this.status = null;
    this.statusAt = 0;
    this.seq = 0;
    this.listeners = new Set();
  }

  /** Apply one update message; returns false when something was missed (the caller asks for a full copy). */
  handle(msg, buffers) {
    if (msg.type !== "update") return true;
    let ok = msg.full || msg.seq === this.seq + 1;
    this.seq = msg.seq;
    msg.curves.forEach((c, i) => {
      ok = this.series.apply(c.name, c.start, c.reset, float64(buffers[2 * i]), float64(buffers[2 * i + 1])) && ok;
    });
    const logChange = msg.log ? this.log.apply(msg.log, msg.full) : null;
    this.status = msg.status;
    this.statusAt = Date.now();
    for (const listener of this.listeners) listener(logChange);
    return ok;
  }

  elapsed() {
    if (!this.status) return 0;
    const extra = this.status.state === "running" ? (Date.now() - this.statusAt) / 1000 : 0;
    return this.status.elapsed + extra;
  }
}

const STORES = new Map(); // view_id -> Store: initialize() and render() get different model proxies

function storeFor(model) {
  const id = model.get("view_id");
  let store = STORES.get(id);
  if (!store) {
    store = new Store(model.get("log_lines"));
    STORES.set(id, store);
  }
  return store;
}

function initialize({ model }) {
  const store = storeFor(model);
  const onMessage = (msg, buffers) => {
    if (!store.handle(msg, buffers || [])) model.send({ type: "sync" });
  };
  model.on("msg:custom", onMessage);
  // A model restored after the cell ended (page reload) has seen none of the updates: ask for a copy.
  if (model.get("updates") > 0 && store.seq === 0) model.send({ type: "sync" });
  return () => {
    model.off("msg:custom", onMessage);
    STORES.delete(model.get("view_id"));
  };
}

function render({ model, el }) {
  const store = storeFor(model);
  const doc = el.ownerDocument;
  const root = doc.createElement("div");
  root.className = "jhvd-live";
  const statusEl = doc.createElement("div");
  statusEl.className = "jhvd-status";
  root.appendChild(statusEl);
  const panels = model.get("plots").map((p) => new PlotPanel(root, store.series, p));
  const log = new LogView(root, store.log);
  el.appendChild(root);
  let frame = null;
  let logChanges = [];
  const paint = () => {
    frame = null;
    statusEl.textContent = formatStatus(store.status, store.elapsed());
    root.dataset.state = store.status?.state ?? "running";
    for (const p of panels) p.draw();
    const changes = logChanges;
    logChanges = [];
    if (changes.some((c) => c.reset)) log.update({ reset: true });
    else if (changes.length)
      log.update({
        reset: false,
        appended: Math.min(store.log.lines.length, changes.reduce((a, c) => a + c.appended, 0)),
        removed: changes.reduce((a, c) => a + c.removed, 0),
      });
  };
  const schedule = (logChange) => {
    if (logChange) logChanges.push(logChange);
    if (frame === null) frame = (globalThis.requestAnimationFrame || ((f) => setTimeout(f, 16)))(paint);
  };
  store.listeners.add(schedule);
  const tick = setInterval(() => {
    if (store.status?.state === "running") statusEl.textContent = formatStatus(store.status, store.elapsed());
  }, 1000);
  paint();
  return () => {
    store.listeners.delete(schedule);
    clearInterval(tick);
  };
}

export default { initialize, render };
