// The live view's plot: points kept per curve with their smoothed values, aligned into uPlot's columns (NaN/Inf as
// gaps), panels per metric family, and the panel a user sees: hidden until a metric exists, raw values as the line
// and the smoothed trend under it, whole-number ticks on a step axis named after what x is, zoom, hover, a log scale.
import { describe, expect, it } from "vitest";
import { formatRate, formatStatus } from "../src/format.js";
import { AlignedColumns, COLOURS, PlotPanel } from "../src/plot.js";
import { SeriesStore, family, nearestIndex, panels, plotMatches } from "../src/series.js";
import { SMOOTHING, smooth, smoothingFor } from "../src/smooth.js";
import { strokes } from "./canvas.js";

const f64 = (a) => new Float64Array(a);
const steps = (n, from = 0) => Array.from({ length: n }, (_, i) => from + i);
const settled = () => new Promise((resolve) => setTimeout(resolve, 0)); // uPlot redraws in a microtask
const put = (store, name, start, xs, ys, reset = false, meta = {}) =>
  store.apply(`${name}@${meta.rank ?? 0}`, start, reset, f64(xs), f64(ys), { name, ...meta });

/** The store's series of `names`, smoothed with `weight`, as AlignedColumns takes them. */
function smoothedSeries(store, names, weight = SMOOTHING) {
  const series = store.ofNames(names);
  for (const s of series) store.smoothed(s, weight);
  return series;
}

describe("SeriesStore", () => {
  it("appends only new points, ignores repeats, and reports gaps", () => {
    const s = new SeriesStore();
    expect(put(s, "loss", 0, [0, 1], [3, 2])).toBe(true);
    expect(put(s, "loss", 1, [1, 2], [2, 1])).toBe(true); // overlaps one point
    const loss = s.series.get("loss@0");
    expect(Array.from(loss.x.subarray(0, loss.n))).toEqual([0, 1, 2]);
    expect(put(s, "loss", 5, [5], [0])).toBe(false);
    put(s, "loss", 0, [10], [7], true); // reset: explicit reports replace parsed values
    expect(s.series.get("loss@0").n).toBe(1);
  });

  it("keeps the smoothed curve equal to a full recomputation as points arrive, for any weight", () => {
    const ys = Array.from({ length: 50 }, (_, i) => (i === 20 ? NaN : Math.sin(i) + 1 / (i + 1)));
    const s = new SeriesStore();
    for (let i = 0; i < 50; i += 7) {
      const part = ys.slice(i, i + 7);
      put(s, "loss", i, part.map((_, k) => i + k), part);
      s.smoothed(s.series.get("loss@0"), 0.8);
    }
    const loss = s.series.get("loss@0");
    expect(Array.from(loss.sm.subarray(0, loss.n))).toEqual(smooth(ys, 0.8));
    expect(Array.from(s.smoothed(loss, 0.3).subarray(0, loss.n))).toEqual(smooth(ys, 0.3)); // the slider moved
  });

  it("smooths from 20 points on unless the user chose a weight", () => {
    expect([smoothingFor(5), smoothingFor(19), smoothingFor(20), smoothingFor(5, 0.9), smoothingFor(50, 0)]).toEqual([
      0, 0, SMOOTHING, 0.9, 0,
    ]);
  });

  it("does not smooth schedules (the learning rate) or bounded metrics (accuracy) unless the user asks", () => {
    const names = ["lr", "learning_rate", "momentum", "acc", "val_accuracy", "top5", "f1", "loss", "val_loss", "grad_norm"];
    expect(names.map((n) => smoothingFor(100, null, n))).toEqual([0, 0, 0, 0, 0, 0, 0, SMOOTHING, SMOOTHING, SMOOTHING]);
    expect(names.map((n) => smoothingFor(100, 0.8, n))).toEqual(names.map(() => 0.8)); // asked for: smoothed
  });

  it("matches metrics to plots and families like the kernel does", () => {
    expect(plotMatches("loss", "val_loss")).toBe(true);
    expect(plotMatches("acc", "test_accuracy")).toBe(true);
    expect(plotMatches("loss", "lr")).toBe(false);
    expect(["val_loss", "test_accuracy", "learning_rate", "lr", "train_loss"].map(family)).toEqual([
      "loss", "accuracy", "learning_rate", "lr", "loss",
    ]);
    expect(panels(["loss", "acc", "val_loss", "lr"], ["all"])).toEqual([
      ["loss", ["loss", "val_loss"]], ["acc", ["acc"]], ["lr", ["lr"]],
    ]);
    expect(panels(["loss", "acc"], ["acc", "loss"])).toEqual([["acc", ["acc"]], ["loss", ["loss"]]]);
  });

  it("finds the point nearest to a step", () => {
    const xs = f64([0, 10, 20, 30]);
    expect(nearestIndex(xs, 4, 14)).toBe(1);
    expect(nearestIndex(xs, 4, 26)).toBe(3);
    expect(nearestIndex(xs, 0, 1)).toBe(-1);
  });
});

describe("AlignedColumns", () => {
  it("gives one curve's points as uPlot's x, raw and smoothed columns, NaN and Inf as gaps", () => {
    const store = new SeriesStore();
    put(store, "loss", 0, [0, 1, 2, 3], [4, NaN, 2, Infinity]);
    const cols = new AlignedColumns(smoothedSeries(store, ["loss"]));
    const sm = smooth([4, NaN, 2, Infinity]);
    expect(cols.data).toEqual([[0, 1, 2, 3], [4, null, 2, null], [sm[0], null, sm[2], null]]);
  });

  it("has no smoothed values where a curve is not smoothed, and leaves out what a log scale cannot show", () => {
    const store = new SeriesStore();
    put(store, "loss", 0, [0, 1, 2], [1, 0, 0.5]);
    expect(new AlignedColumns(smoothedSeries(store, ["loss"], 0)).data[2]).toEqual([null, null, null]);
    expect(new AlignedColumns(smoothedSeries(store, ["loss"], 0), true).data[1]).toEqual([1, null, 0.5]);
  });

  it("puts several curves on the union of their steps, drawn across steps a curve has no point at", () => {
    const store = new SeriesStore();
    put(store, "loss", 0, steps(5), [5, 4, 3, 2, 1]);
    put(store, "val_loss", 0, [1.5, 4], [4.5, 1.5]);
    const cols = new AlignedColumns(smoothedSeries(store, ["loss", "val_loss"]));
    expect(cols.data[0]).toEqual([0, 1, 1.5, 2, 3, 4]);
    expect(cols.data[1]).toEqual([5, 4, undefined, 3, 2, 1]);
    expect(cols.data[3]).toEqual([undefined, undefined, 4.5, undefined, undefined, 1.5]);
  });

  it("widens a gap to the curve's own neighbouring points when other curves have steps in between", () => {
    const store = new SeriesStore();
    put(store, "loss", 0, steps(6), [6, 5, 4, 3, 2, 1]);
    put(store, "val_loss", 0, [0, 2, 4], [6, NaN, 2]);
    const cols = new AlignedColumns(smoothedSeries(store, ["loss", "val_loss"]));
    expect(cols.data[3]).toEqual([6, null, null, null, 2, undefined]);
  });

  it("appends new points without rebuilding, and says when a point lies before the last step", () => {
    const store = new SeriesStore();
    put(store, "loss", 0, [0, 1], [2, 1]);
    const cols = new AlignedColumns(smoothedSeries(store, ["loss"]));
    const x = cols.data[0];
    put(store, "loss", 2, [2, 3], [NaN, 0.5]);
    smoothedSeries(store, ["loss"]);
    expect(cols.append()).toBe(2);
    expect(cols.data[0]).toBe(x);
    expect(cols.data[1]).toEqual([2, 1, null, 0.5]);
    expect(cols.append()).toBe(0);
    put(store, "loss", 4, [1.5], [9]);
    smoothedSeries(store, ["loss"]);
    expect(cols.append()).toBe(-1);
    // Built anew, a step that went back is drawn in step order.
    expect(new AlignedColumns(smoothedSeries(store, ["loss"])).data[0]).toEqual([0, 1, 1.5, 2, 3]);
  });
});

describe("PlotPanel", () => {
  function panel(names = ["loss", "val_loss"], settings = {}) {
    const store = new SeriesStore();
    const el = document.createElement("div");
    document.body.appendChild(el);
    const p = new PlotPanel(el, store, names[0], { smoothing: null, logY: false, manyRanks: false, ...settings });
    p.setNames(names);
    return { store, p };
  }

  it("takes no space until one of its metrics has a point", async () => {
    const { store, p } = panel(["acc", "accuracy"]);
    p.draw();
    await settled();
    expect(p.root.style.display).toBe("none");
    expect(p.plot).toBe(null);
    put(store, "loss", 0, [0], [1]);
    p.draw();
    await settled();
    expect(p.root.style.display).toBe("none");
    put(store, "accuracy", 0, [0], [0.5]);
    p.draw();
    await settled();
    expect(p.root.style.display).toBe("");
    expect(p.root.dataset.points).toBe("1");
  });

  it("draws raw values as the line and the smoothed trend broad and faint under it, from 20 points on", async () => {
    const { store, p } = panel();
    put(store, "loss", 0, [0, 1, 2], [3, 2, 1]);
    put(store, "val_loss", 0, [2], [2.5]);
    p.draw();
    await settled();
    expect(p.plot.series.slice(1).map((s) => [s.label, s.alpha, s.width])).toEqual([
      ["loss", 1, 1.5],
      ["loss (smoothed)", 0.3, 4],
      ["val_loss", 1, 1.5],
      ["val_loss (smoothed)", 0.3, 4],
    ]);
    expect(p.plot.data[2]).toEqual([null, null, null]); // 3 points: not smoothed
    expect(p.root.dataset.points).toBe("4");
    const plot = p.plot;
    strokes.length = 0;
    put(store, "loss", 3, steps(27, 3), steps(27).map((i) => 1 / (i + 2)));
    p.draw();
    await settled();
    expect(p.plot).toBe(plot); // new points go into the same chart
    expect(p.root.dataset.points).toBe("31");
    const lossStrokes = strokes.filter((s) => s.style === COLOURS[0] && s.segments > 0);
    expect(lossStrokes.map((s) => [s.segments, s.alpha])).toEqual([[30, 1], [30, 0.3]]); // raw, then the trend
    const last = JSON.parse(p.root.dataset.last);
    expect(last["loss@0"]).toBe(1 / 28); // the last point drawn is the last value reported
    const trend = smooth([3, 2, 1, ...steps(27).map((i) => 1 / (i + 2))], SMOOTHING);
    expect(JSON.parse(p.root.dataset.lastSmoothed)["loss@0"]).toBeCloseTo(trend.at(-1), 12);
    expect([...p.legend.children].map((c) => c.textContent)).toEqual(["loss 0.03571", "val_loss 2.5"]);
  });

  it("names the x axis after what x is and puts its ticks on whole steps", async () => {
    const { store, p } = panel(["loss"]);
    put(store, "loss", 0, [1, 2, 3], [0.5, 0.3, 0.2], false, { xKind: "epoch" });
    p.draw();
    await settled();
    expect(p.plot.axes[0].label).toBe("epoch");
    expect(p.root.dataset.xLabel).toBe("epoch");
    const ticks = p.root.dataset.xTicks.split(",").map(Number);
    expect(ticks.length).toBeGreaterThan(1);
    expect(ticks.every(Number.isInteger)).toBe(true);
  });

  it("leaves a gap at a NaN or Inf value", async () => {
    const { store, p } = panel(["loss"]);
    put(store, "loss", 0, steps(6), [6, 5, NaN, 3, Infinity, 1]);
    p.draw();
    await settled();
    expect(p.plot.data[1]).toEqual([6, 5, null, 3, null, 1]);
    expect(p.plot.series[1]._paths.gaps.length).toBe(2); // uPlot clips the line there
  });

  it("on a log scale draws a loss that reached 0 over the range of its values, and says what it left out", async () => {
    // DDP printed loss=0.00000: the zeros cannot be drawn, and the smoothed curve of the zeros tends to 1e-25; the
    // y range must still be the values' (0.2 to 1), the axes drawn, the hover working.
    const { store, p } = panel(["loss"], { logY: true });
    const ys = steps(400).map((i) => Math.max(0, 1 - i / 300));
    put(store, "loss", 0, steps(400), ys);
    p.draw();
    await settled();
    const { min, max } = p.plot.scales.y;
    expect(min).toBeGreaterThan(0.002);
    expect(max).toBeLessThan(1.2);
    const labels = p.plot.axes[1]._values.filter(Boolean).map(Number); // the y axis is drawn, over the values
    expect(labels).toContain(1);
    expect(labels.length).toBeGreaterThanOrEqual(3);
    expect(labels.every((v) => v >= min && v <= max)).toBe(true);
    expect(p.titleEl.textContent).toBe("loss (log scale)");
    expect(p.note.textContent).toBe("log scale: 100 values ≤ 0 left out");
    p.plot.setCursor({ left: p.plot.valToPos(350, "x"), top: 10 });
    expect(p.readout.textContent).toMatch(/^step 350 · loss 0 \(smoothed /);
  });

  it("on a log scale says a panel has no value above 0, and draws it as it is", async () => {
    const { store, p } = panel(["loss"], { logY: true });
    put(store, "loss", 0, steps(3), [0, -1, -2]);
    p.draw();
    await settled();
    expect(p.plot.scales.y.distr).toBe(1);
    expect(p.titleEl.textContent).toBe("loss");
    expect(p.note.textContent).toBe("log scale: no value above 0, drawn linear");
  });

  it("draws on a log scale when asked, leaving out what it cannot show", async () => {
    const { store, p } = panel(["loss"], { logY: true });
    put(store, "loss", 0, steps(4), [10, 1, 0, 0.01]);
    p.draw();
    await settled();
    expect(p.plot.scales.y.distr).toBe(3);
    expect(p.plot.data[1]).toEqual([10, 1, null, 0.01]);
    expect(p.titleEl.textContent).toBe("loss (log scale)");
  });

  it("zooms to a dragged range and keeps it while points arrive; double-click shows every step again", async () => {
    const { store, p } = panel(["loss"]);
    put(store, "loss", 0, [0, 10, 20, 30], [4, 3, 2, 1]);
    p.draw();
    await settled();
    const u = p.plot;
    const px = (x) => u.valToPos(x, "x");
    // What uPlot does at the end of a drag from step 10 to step 20: the selection, then the x scale.
    u.setSelect({ left: px(10), width: px(20) - px(10), top: 0, height: u.bbox.height });
    u.setScale("x", { min: 10, max: 20 });
    expect(p.zoom[0]).toBeCloseTo(10, 6);
    expect(p.zoom[1]).toBeCloseTo(20, 6);
    expect(p.titleEl.textContent).toBe("loss  (zoomed: double-click to reset)");
    put(store, "loss", 4, [40], [0.5]);
    p.draw();
    await settled();
    expect(u.scales.x.min).toBeCloseTo(10, 6);
    expect(u.scales.x.max).toBeCloseTo(20, 6);
    u.over.dispatchEvent(new MouseEvent("dblclick"));
    await settled();
    expect(p.zoom).toBe(null);
    expect(p.titleEl.textContent).toBe("loss");
    expect([u.scales.x.min, u.scales.x.max]).toEqual([0, 40]);
    put(store, "loss", 5, [50], [0.4]);
    p.draw();
    await settled();
    expect(u.scales.x.max).toBe(50); // follows new points again
  });

  it("reads out the raw values at the step under the pointer first, the smoothed ones after", async () => {
    const { store, p } = panel();
    const ys = steps(25).map((i) => 4 - i / 10);
    put(store, "loss", 0, steps(25), ys);
    put(store, "val_loss", 0, [20], [2.5]);
    p.draw();
    await settled();
    p.plot.setCursor({ left: p.plot.valToPos(19.8, "x"), top: 10 });
    const sm = +smooth(ys)[20].toPrecision(4);
    expect(p.readout.textContent).toBe(`step 20 · loss 2 (smoothed ${sm}) · val_loss 2.5`);
    p.toggle("val_loss@0"); // hidden from the legend: left out of the readout too
    p.plot.setCursor({ left: p.plot.valToPos(19.8, "x"), top: 10 });
    expect(p.readout.textContent).toBe(`step 20 · loss 2 (smoothed ${sm})`); // one curve: the same words
    expect(p.legend.querySelector('[data-key="val_loss@0"]').getAttribute("aria-pressed")).toBe("false");
    p.plot.setCursor({ left: -10, top: -10 });
    expect(p.readout.textContent).toBe("");
  });

  it("names each rank's curve where several ranks are shown", async () => {
    const { store, p } = panel(["loss"], { manyRanks: true });
    put(store, "loss", 0, [0, 1], [2, 1], false, { rank: 0 });
    put(store, "loss", 0, [0, 1], [2.2, 1.1], false, { rank: 1 });
    p.draw();
    await settled();
    expect([...p.legend.children].map((c) => c.textContent)).toEqual(["loss · rank 0 1", "loss · rank 1 1.1"]);
  });

  it("starts a new chart when a curve joins the panel or a curve is replaced", async () => {
    const { store, p } = panel();
    put(store, "loss", 0, [0, 1], [2, 1]);
    p.draw();
    await settled();
    const first = p.plot;
    put(store, "val_loss", 0, [1], [1.5]);
    p.draw();
    await settled();
    expect(p.plot).not.toBe(first);
    expect(p.plot.series.length).toBe(5);
    put(store, "loss", 0, [7], [0.1], true); // reports replace the printed loss
    p.draw();
    await settled();
    expect(p.plot.data[0]).toEqual([1, 7]);
    expect(p.plot.data[1]).toEqual([undefined, 0.1]);
  });
});

describe("the status line", () => {
  it("says state, ranks, step, samples/s, elapsed and ETA", () => {
    const line = formatStatus(
      { state: "running", ranks: 2, step: 120, total: 1000, samples_per_s: 5320.4, eta: 100, elapsed: 0 },
      83,
    );
    expect(line).toBe("● running · 2 ranks · step 120/1,000 · 5,320 samples/s · 1:23 elapsed · ETA 1:40");
  });

  it("says steps/s with three significant digits, and the progress bar's description", () => {
    const line = formatStatus({ state: "running", ranks: 2, step: 7, total: 30, steps_per_s: 4.3661, desc: "train" }, 2);
    expect(line).toBe("● running · 2 ranks · train · step 7/30 · 4.37 steps/s · 0:02 elapsed");
    expect([formatRate(0.012345), formatRate(43.21), formatRate(1234.5)]).toEqual(["0.0123", "43.2", "1,235"]);
  });

  it("says the steps counted beside a printed epoch, in the sidebar's unit", () => {
    const epochs = { state: "done", ranks: 2, step: null, epoch: 8, steps: 192 };
    expect(formatStatus(epochs, 5)).toBe("✓ finished · 2 ranks · epoch 8 · 192 steps · 0:05 elapsed");
    const printed = { state: "done", ranks: 2, step: 40, epoch: 8, steps: 192 }; // a printed step is the one said
    expect(formatStatus(printed, 5)).toBe("✓ finished · 2 ranks · step 40 · 0:05 elapsed");
  });
});
