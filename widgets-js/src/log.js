// The live view's log: rank 0's lines with their ANSI colours, capped at --log-lines, progress bars in place.

const PALETTE = [
  "#3e424d", "#e75c58", "#00a250", "#ddb62b", "#208ffb", "#d160c4", "#60c6c8", "#c5c1b4",
  "#282c36", "#b22b31", "#007427", "#b27d12", "#0065ca", "#a03196", "#258f8f", "#a1a6b2",
];

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
