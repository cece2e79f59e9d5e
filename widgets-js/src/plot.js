// One plot panel of the live view, drawn by uPlot: each curve's raw values as a solid line (what was reported, and
// the last point is the last value), its smoothed trend as a broad translucent band under it, the x axis named after
// what the training counts (step, epoch, samples, time) with whole-number ticks for counts. Drag to zoom into a range
// of steps, double-click to see them all again, hover for the values at a step (raw first), click a legend entry to
// hide or show its curve. The panel follows new points until the user zooms, and takes no space until one of its
// metrics has a point.
import uPlot from "uplot";
import { formatNumber, formatTick } from "./format.js";
import { nearestIndex } from "./series.js";
import { smoothingFor } from "./smooth.js";

export const COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
export const X_LABELS = { step: "step", epoch: "epoch", samples: "samples", time: "time (s)" };
const COUNTS = new Set(["step", "epoch", "samples"]); // whole-number ticks
const INTEGER_INCRS = [1, 2, 5].flatMap((m) => Array.from({ length: 10 }, (_, p) => m * 10 ** p)).sort((a, b) => a - b);

/** Per series: is x non-decreasing from index `from` on, starting at or after `after`? */
function increasing(s, from, after) {
  let prev = after;
  for (let i = from; i < s.n; i++) {
    if (s.x[i] < prev) return false;
    prev = s.x[i];
  }
  return true;
}

/** A copy of a series' points ordered by x (stable: of two points at one step, the later one is drawn). */
function sortedCopy(s) {
  const order = Array.from({ length: s.n }, (_, i) => i).sort((a, b) => s.x[a] - s.x[b] || a - b);
  const pick = (arr) => Float64Array.from(order, (i) => arr[i]);
  return { name: s.name, n: s.n, x: pick(s.x), y: pick(s.y), sm: pick(s.sm) };
}

/**
 * uPlot's columns for a panel's curves: [x, raw 0, smoothed 0, raw 1, smoothed 1, ...] over the union of their steps,
 * extended as points arrive (a redraw costs the new points, not the whole table). Each series carries `sm`, its
 * smoothed values (NaN where it is not smoothed). NaN and infinities are null, which uPlot draws as a gap, and so is a
 * value a log scale cannot show (`positive`). Where another curve has a step and this one has no point, the value is
 * undefined, which uPlot draws across; next to a gap it is null too, so the gap reaches this curve's own points.
 */
export class AlignedColumns {
  constructor(series, positive = false) {
    this.series = series;
    this.positive = positive;
    this.taken = series.map(() => 0);
    this.data = [[], ...series.flatMap(() => [[], []])];
    if (this.append() < 0) this.merge(series.map(sortedCopy), series.map(() => 0));
    this.taken = series.map((s) => s.n);
  }

  value(v) {
    return Number.isFinite(v) && (!this.positive || v > 0) ? v : null;
  }

  /** Take the points that arrived since; returns how many, or -1 when one lies before the last step drawn
   * (the caller then builds the columns anew). */
  append() {
    const x = this.data[0];
    const last = x.length ? x[x.length - 1] : -Infinity;
    if (!this.series.every((s, k) => increasing(s, this.taken[k], last))) return -1;
    const added = this.merge(this.series, this.taken);
    this.taken = this.series.map((s) => s.n);
    return added;
  }

  /** Merge the points of `series` from `from[k]` on (each ordered by x, none before the last row) into rows. */
  merge(series, from) {
    const x = this.data[0];
    const at = [...from];
    let added = 0;
    for (;;) {
      let k = -1;
      for (let j = 0; j < series.length; j++) {
        if (at[j] < series[j].n && (k < 0 || series[j].x[at[j]] < series[k].x[at[k]])) k = j;
      }
      if (k < 0) return added;
      const s = series[k];
      const i = at[k]++;
      if (!x.length || x[x.length - 1] !== s.x[i]) {
        x.push(s.x[i]);
        for (let c = 1; c < this.data.length; c++) this.data[c].push(undefined);
      }
      this.put(1 + 2 * k, this.value(s.y[i]));
      this.put(2 + 2 * k, this.value(s.sm[i]));
      added += 1;
    }
  }

  /** Set column `c`'s last row; undefined rows between a gap and this value (or this gap and a value) become gap. */
  put(c, value) {
    const col = this.data[c];
    const row = col.length - 1;
    col[row] = value;
    let p = row - 1;
    while (p >= 0 && col[p] === undefined) p -= 1;
    if (p >= 0 && p < row - 1 && (value === null || col[p] === null)) col.fill(null, p + 1, row);
  }
}

/** How many finite raw values of `series` are above 0 and how many at or below it (a log scale cannot show those). */
export function leftOut(series) {
  let positive = 0;
  let nonPositive = 0;
  for (const s of series) {
    for (let i = 0; i < s.n; i++) {
      const v = s.y[i];
      if (v > 0 && Number.isFinite(v)) positive += 1;
      else if (Number.isFinite(v)) nonPositive += 1;
    }
  }
  return { positive, nonPositive };
}

function themeColour(el, name, fallback) {
  const view = el.ownerDocument.defaultView;
  const value = view?.getComputedStyle ? view.getComputedStyle(el).getPropertyValue(name).trim() : "";
  return value || fallback;
}

/** `loss`, or `loss · rank 1` where several ranks are shown. */
export function curveLabel(s, manyRanks) {
  return manyRanks ? `${s.name} · rank ${s.rank}` : s.name;
}

/**
 * The panel `title` of a view: its curves are the store's series of the metric names `setNames()` gave. `settings`
 * (shared by the view's panels): { smoothing: null (automatic) or a weight, logY, manyRanks }. draw() brings the
 * chart up to date with the store and the settings.
 */
export class PlotPanel {
  constructor(el, store, title, settings, height = 190) {
    const doc = el.ownerDocument;
    this.store = store;
    this.title = title;
    this.names = [];
    this.settings = settings;
    this.height = height;
    this.zoom = null; // [x0, x1] while zoomed
    this.hidden = new Set(); // keys of curves the user hid from the legend
    this.plot = null;
    this.columns = null;
    this.logY = false; // the log scale drawn: asked for, and some value above 0
    this.shape = "";
    this.xTicks = [];
    this.root = doc.createElement("div");
    this.root.className = "jhvd-plot";
    this.root.style.display = "none";
    this.root.dataset.points = "0";
    this.root.dataset.panel = title;
    const head = doc.createElement("div");
    head.className = "jhvd-plot-head";
    this.titleEl = doc.createElement("span");
    this.titleEl.className = "jhvd-plot-title";
    this.legend = doc.createElement("span");
    this.legend.className = "jhvd-legend";
    this.note = doc.createElement("span");
    this.note.className = "jhvd-plot-note";
    this.note.style.display = "none";
    head.append(this.titleEl, this.note, this.legend);
    this.chart = doc.createElement("div");
    this.chart.className = "jhvd-chart";
    this.readout = doc.createElement("div");
    this.readout.className = "jhvd-readout";
    this.root.append(head, this.chart, this.readout);
    el.appendChild(this.root);
    this.legend.addEventListener("click", (e) => this.toggle(e.target.closest?.("[data-key]")?.dataset.key));
    const Observer = doc.defaultView?.ResizeObserver;
    this.resizeObserver = Observer ? new Observer(() => this.fit()) : null;
    this.resizeObserver?.observe(this.root);
    this.showTitle();
  }

  setNames(names) {
    this.names = names;
  }

  get width() {
    return Math.max(200, this.chart.clientWidth || 600);
  }

  /** The panel's curves, each with its smoothed values for the current settings. */
  curves() {
    const series = this.store.ofNames(this.names).filter((s) => s.n > 0);
    for (const s of series) this.store.smoothed(s, smoothingFor(s.n, this.settings.smoothing, s.name));
    return series;
  }

  /** Bring the chart up to date: new points appended, a new curve or a changed setting redrawn. */
  draw() {
    const series = this.curves();
    this.root.dataset.points = String(series.reduce((a, s) => a + s.n, 0));
    this.root.style.display = series.length ? "" : "none";
    if (!series.length) return;
    const weights = series.map((s) => s.smWeight).join(",");
    const left = this.settings.logY ? leftOut(series) : null;
    const logY = !!left && left.positive > 0; // a log scale of a panel with no value above 0 would draw nothing
    if (logY !== this.logY) {
      this.logY = logY;
      this.showTitle();
    }
    this.showNote(left);
    const shape = [series.map((s) => s.key).join("\n"), series[0].xKind, this.logY].join("|");
    const same =
      this.columns &&
      this.shape === shape &&
      this.weights === weights &&
      this.columns.series.every((s, k) => s === series[k]); // a reset curve is a new object
    const added = same ? this.columns.append() : -1;
    if (added < 0) this.columns = new AlignedColumns(series, this.logY);
    this.weights = weights;
    if (!this.plot || this.shape !== shape) {
      this.plot?.destroy();
      this.shape = shape;
      this.plot = this.createPlot(series);
    } else if (added !== 0) {
      this.plot.setData(this.columns.data, !this.zoom);
      if (this.zoom) this.plot.setScale("x", { min: this.zoom[0], max: this.zoom[1] });
    }
    this.showLegend(series);
    const last = {};
    const lastSmoothed = {};
    for (const s of series) {
      last[s.key] = s.y[s.n - 1];
      lastSmoothed[s.key] = s.smWeight > 0 ? s.sm[s.n - 1] : s.y[s.n - 1];
    }
    Object.assign(this.root.dataset, {
      last: JSON.stringify(last),
      lastSmoothed: JSON.stringify(lastSmoothed),
      xLabel: X_LABELS[series[0].xKind] ?? series[0].xKind,
    });
  }

  createPlot(series) {
    const text = themeColour(this.root, "--jp-ui-font-color2", "#666");
    const grid = themeColour(this.root, "--jp-border-color2", "#e3e3e3");
    const font = `11px ${themeColour(this.root, "--jp-ui-font-family", "sans-serif")}`;
    const axis = { stroke: text, font, labelFont: font, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
    const kind = series[0].xKind;
    /** @type {import("uplot").Axis} */
    const xAxis = {
      ...axis,
      label: X_LABELS[kind] ?? kind,
      size: 28,
      labelSize: 14,
      labelGap: 0,
      values: (u, splits) => splits.map(formatTick),
    };
    if (COUNTS.has(kind)) {
      xAxis.incrs = INTEGER_INCRS;
      xAxis.splits = (u, i, min, max, incr) => {
        const step = Math.max(1, Math.round(incr));
        const out = [];
        for (let v = Math.ceil(min / step) * step; v <= max; v += step) out.push(v);
        this.xTicks = out;
        return out;
      };
    }
    /** @type {import("uplot").Options} */
    const opts = {
      width: this.width,
      height: this.height,
      legend: { show: false }, // the head shows the latest values, the readout the values under the pointer
      cursor: { y: false, drag: { x: true, y: false, setScale: true }, points: { size: 7 } },
      // A log scale spans the raw values (uPlot's own snaps to whole decades, a loss from 1 to 0.15 then fills a
      // third; and a smoothed curve of a loss that reached 0 tends to 1e-25, which would squash the rest to a line).
      scales: {
        x: { time: false },
        y: this.logY ? { distr: 3, log: 10, range: (u) => this.logRange(u) } : {},
      },
      axes: [xAxis, { ...axis, size: 58, values: (u, splits) => splits.map((v) => this.yTick(v)) }],
      series: [
        { label: X_LABELS[kind] ?? kind },
        ...series.flatMap((s, k) => {
          const stroke = COLOURS[k % COLOURS.length];
          const show = !this.hidden.has(s.key);
          return [
            { label: s.name, stroke, width: 1.5, show, points: { size: 4, fill: stroke } }, // marked while sparse
            { label: `${s.name} (smoothed)`, stroke, width: 4, alpha: 0.3, show, points: { show: false } },
          ];
        }),
      ],
      hooks: {
        setSelect: [
          (u) => {
            if (u.select.width <= 0) return;
            const x0 = u.posToVal(u.select.left, "x");
            this.zoom = [x0, u.posToVal(u.select.left + u.select.width, "x")];
            this.showTitle();
          },
        ],
        setCursor: [(u) => this.showReadout(u)],
        draw: [() => (this.root.dataset.xTicks = this.xTicks.join(","))], // what the axis shows, for tests and tools
      },
    };
    const plot = new uPlot(opts, this.columns.data, this.chart);
    plot.over.addEventListener("dblclick", () => {
      this.zoom = null; // uPlot itself has gone back to every step
      this.showTitle();
    });
    if (this.zoom) plot.setScale("x", { min: this.zoom[0], max: this.zoom[1] });
    return plot;
  }

  /** The y range of a log scale: the positive raw values of the shown curves in the x range shown, with a margin.
   * @param {import("uplot")} u
   * @returns {[number, number]} */
  logRange(u) {
    const x = u.data[0];
    const lo = u.scales.x.min ?? -Infinity;
    const hi = u.scales.x.max ?? Infinity;
    let min = Infinity;
    let max = -Infinity;
    this.columns.series.forEach((s, k) => {
      if (this.hidden.has(s.key)) return;
      const col = u.data[1 + 2 * k];
      for (let i = 0; i < x.length; i++) {
        const v = col[i];
        if (v > 0 && x[i] >= lo && x[i] <= hi) {
          if (v < min) min = v;
          if (v > max) max = v;
        }
      }
    });
    if (!(min <= max)) return [0.1, 10];
    return [min / 1.15, max * 1.15];
  }

  /** Beside the title: what the log scale left out (values at or below 0, which it cannot show). */
  showNote(left) {
    const n = left?.nonPositive ?? 0;
    let text = "";
    if (left && !left.positive) text = "log scale: no value above 0, drawn linear";
    else if (n) text = `log scale: ${n.toLocaleString("en-US")} value${n === 1 ? "" : "s"} ≤ 0 left out`;
    this.note.textContent = text;
    this.note.style.display = text ? "" : "none";
  }

  /** A y tick's label; on a log scale only 1, 2 and 5 times a power of ten (uPlot's minor ticks come as null). */
  yTick(v) {
    if (v === null || v === undefined) return "";
    if (this.logY && v > 0) {
      const mantissa = Math.round((v / 10 ** Math.floor(Math.log10(v) + 1e-9)) * 1000) / 1000;
      if (![1, 2, 5].includes(mantissa)) return "";
    }
    return formatNumber(v);
  }

  showLegend(series) {
    const doc = this.root.ownerDocument;
    this.legend.replaceChildren(
      ...series.map((s, k) => {
        const item = doc.createElement("button");
        item.type = "button";
        item.className = "jhvd-legend-item";
        item.dataset.key = s.key;
        item.style.setProperty("--jhvd-colour", COLOURS[k % COLOURS.length]);
        item.setAttribute("aria-pressed", String(!this.hidden.has(s.key)));
        item.title = this.hidden.has(s.key) ? "show this curve" : "hide this curve";
        item.textContent = `${curveLabel(s, this.settings.manyRanks)} ${formatNumber(s.y[s.n - 1])}`;
        return item;
      }),
    );
  }

  toggle(key) {
    if (!key || !this.plot) return;
    if (this.hidden.has(key)) this.hidden.delete(key);
    else this.hidden.add(key);
    const k = this.columns.series.findIndex((s) => s.key === key);
    if (k >= 0) {
      const show = !this.hidden.has(key);
      this.plot.setSeries(1 + 2 * k, { show });
      this.plot.setSeries(2 + 2 * k, { show });
    }
    this.showLegend(this.columns.series);
  }

  fit() {
    if (this.plot && this.root.style.display !== "none" && this.plot.width !== this.width) {
      this.plot.setSize({ width: this.width, height: this.height });
    }
  }

  showTitle() {
    const scale = this.logY ? " (log scale)" : "";
    this.titleEl.textContent = this.title + scale + (this.zoom ? "  (zoomed: double-click to reset)" : "");
  }

  showReadout(u) {
    const i = u.cursor.idx;
    this.readout.textContent = i === null || i === undefined || u.cursor.left < 0 ? "" : this.readoutText(u.data[0][i]);
  }

  /** `step 120 · loss 0.41 (smoothed 0.44) · acc 0.9`: for the points nearest to x, the raw value first, the
   * smoothed one in brackets where the curve is smoothed; the same words for one curve as for several. */
  readoutText(x) {
    const parts = [];
    let at = null;
    const series = this.columns?.series ?? [];
    for (const s of series) {
      if (this.hidden.has(s.key)) continue;
      const i = nearestIndex(s.x, s.n, x);
      if (i < 0) continue;
      at = at ?? s.x[i];
      const smoothed = s.smWeight > 0 ? ` (smoothed ${formatNumber(s.sm[i])})` : "";
      parts.push(`${curveLabel(s, this.settings.manyRanks)} ${formatNumber(s.y[i])}${smoothed}`);
    }
    if (at === null) return "";
    const kind = series[0]?.xKind ?? "step";
    return [`${X_LABELS[kind] ?? kind} ${formatTick(at)}`, ...parts].join(" · ");
  }

  destroy() {
    this.resizeObserver?.disconnect();
    this.plot?.destroy();
    this.plot = null;
    this.root.remove();
  }
}
