// One plot panel of the live view, drawn by uPlot: for each metric that matches the panel's pattern (`--plot
// loss,acc` makes two panels), its raw points faint and its smoothed curve solid. Drag to zoom into a range of
// steps, double-click to see them all again, hover for the values at a step. The panel follows new points until
// the user zooms, and takes no space until one of its metrics has a point.
import uPlot from "uplot";
import { formatNumber } from "./format.js";
import { nearestIndex } from "./series.js";

export const COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"];
const CHART_HEIGHT = 180; // px; the title line above it makes the panel about 200 px tall

const gapOr = (v) => (Number.isFinite(v) ? v : null);

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
 * uPlot's columns for a panel's metrics: [x, raw 0, smoothed 0, raw 1, smoothed 1, ...] over the union of their
 * steps, extended as points arrive (a redraw costs the new points, not the whole table).
 * NaN and infinities are null, which uPlot draws as a gap. Where another metric has a step and this one has no
 * point, the value is undefined, which uPlot draws across; next to a gap it is null too, so that the gap reaches
 * this metric's own neighbouring points.
 */
export class AlignedColumns {
  constructor(series) {
    this.series = series;
    this.taken = series.map(() => 0);
    this.data = [[], ...series.flatMap(() => [[], []])];
    if (this.append() < 0) this.merge(series.map(sortedCopy), series.map(() => 0));
    this.taken = series.map((s) => s.n);
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
      this.put(1 + 2 * k, gapOr(s.y[i]));
      this.put(2 + 2 * k, gapOr(s.sm[i]));
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

function themeColour(el, name, fallback) {
  const view = el.ownerDocument.defaultView;
  const value = view?.getComputedStyle ? view.getComputedStyle(el).getPropertyValue(name).trim() : "";
  return value || fallback;
}

/** The plot of the metrics matching `pattern`, appended to `el`; draw() brings it up to date with `store`. */
export class PlotPanel {
  constructor(el, store, pattern, height = CHART_HEIGHT) {
    const doc = el.ownerDocument;
    this.store = store;
    this.pattern = pattern;
    this.height = height;
    this.zoom = null; // [x0, x1] while zoomed
    this.plot = null;
    this.columns = null;
    this.root = doc.createElement("div");
    this.root.className = "jhvd-plot";
    this.root.style.display = "none";
    this.root.dataset.points = "0";
    const head = doc.createElement("div");
    head.className = "jhvd-plot-head";
    this.title = doc.createElement("span");
    this.title.className = "jhvd-plot-title";
    this.legend = doc.createElement("span");
    this.legend.className = "jhvd-legend";
    head.append(this.title, this.legend);
    this.chart = doc.createElement("div");
    this.chart.className = "jhvd-chart";
    this.readout = doc.createElement("div");
    this.readout.className = "jhvd-readout";
    this.root.append(head, this.chart, this.readout);
    el.appendChild(this.root);
    const Observer = doc.defaultView?.ResizeObserver;
    this.resizeObserver = Observer ? new Observer(() => this.fit()) : null;
    this.resizeObserver?.observe(this.root);
    this.showTitle();
  }

  get width() {
    return Math.max(200, this.chart.clientWidth || 600);
  }

  /** Bring the chart up to date with the store: new points appended, a new metric or a reset curve redrawn. */
  draw() {
    const series = this.store.matching(this.pattern).filter((s) => s.n > 0);
    this.root.dataset.points = String(series.reduce((a, s) => a + s.n, 0));
    this.root.style.display = series.length ? "" : "none";
    if (!series.length) return;
    const same = this.columns?.series.length === series.length && this.columns.series.every((s, k) => s === series[k]);
    const added = same ? this.columns.append() : -1;
    if (added === 0) return;
    if (added < 0) this.columns = new AlignedColumns(series);
    const names = series.map((s) => s.name).join("\n");
    if (!this.plot || this.plotNames !== names) {
      this.plot?.destroy();
      this.plot = this.createPlot(series);
      this.plotNames = names;
    } else if (this.zoom) {
      this.plot.setData(this.columns.data, false);
      this.plot.setScale("x", { min: this.zoom[0], max: this.zoom[1] });
    } else {
      this.plot.setData(this.columns.data);
    }
    this.legend.replaceChildren(
      ...series.map((s, k) => {
        const item = this.root.ownerDocument.createElement("span");
        item.className = "jhvd-legend-item";
        item.style.color = COLOURS[k % COLOURS.length];
        item.textContent = `${s.name} ${formatNumber(s.y[s.n - 1])}`;
        return item;
      }),
    );
  }

  createPlot(series) {
    const text = themeColour(this.root, "--jp-ui-font-color2", "#666");
    const grid = themeColour(this.root, "--jp-border-color2", "#e3e3e3");
    const axis = { stroke: text, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
    const opts = {
      width: this.width,
      height: this.height,
      legend: { show: false }, // the head shows the latest values, the readout the values under the pointer
      cursor: { y: false, drag: { x: true, y: false, setScale: true } },
      scales: { x: { time: false } },
      axes: [axis, { ...axis, size: 56 }],
      series: [
        { label: "step" },
        ...series.flatMap((s, k) => {
          const stroke = COLOURS[k % COLOURS.length];
          return [
            { label: s.name, stroke, width: 1, alpha: 0.3, points: { show: false } },
            { label: `${s.name} (smoothed)`, stroke, width: 1.6 },
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

  fit() {
    if (this.plot && this.root.style.display !== "none" && this.plot.width !== this.width) {
      this.plot.setSize({ width: this.width, height: this.height });
    }
  }

  showTitle() {
    this.title.textContent = this.pattern + (this.zoom ? "  (zoomed: double-click to reset)" : "");
  }

  showReadout(u) {
    const i = u.cursor.idx;
    this.readout.textContent = i === null || i === undefined || u.cursor.left < 0 ? "" : this.readoutText(u.data[0][i]);
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

  destroy() {
    this.resizeObserver?.disconnect();
    this.plot?.destroy();
    this.plot = null;
  }
}
