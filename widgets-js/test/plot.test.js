// The live view's plot: points kept per metric with their smoothed curve, aligned into uPlot's columns (NaN/Inf
// as gaps), and the panel a user sees: hidden until a metric exists, several metrics at once, zoom, hover values.
import { describe, expect, it } from "vitest";
import { formatStatus } from "../src/format.js";
import { AlignedColumns, COLOURS, PlotPanel } from "../src/plot.js";
import { SeriesStore, nearestIndex, plotMatches } from "../src/series.js";
import { smooth } from "../src/smooth.js";
import { strokes } from "./canvas.js";

const f64 = (a) => new Float64Array(a);
const steps = (n, from = 0) => Array.from({ length: n }, (_, i) => from + i);
const settled = () => new Promise((resolve) => setTimeout(resolve, 0)); // uPlot redraws in a microtask

describe("SeriesStore", () => {
  it("appends only new points, ignores repeats, and reports gaps", () => {
    const s = new SeriesStore();
    expect(s.apply("loss", 0, false, f64([0, 1]), f64([3, 2]))).toBe(true);
    expect(s.apply("loss", 1, false, f64([1, 2]), f64([2, 1]))).toBe(true); // overlaps one point
    const loss = s.series.get("loss");
    expect(Array.from(loss.x.subarray(0, loss.n))).toEqual([0, 1, 2]);
    expect(s.apply("loss", 5, false, f64([5]), f64([0]))).toBe(false);
    s.apply("loss", 0, true, f64([10]), f64([7])); // reset: explicit reports replace parsed values
    expect(s.series.get("loss").n).toBe(1);
  });

  it("keeps the smoothed curve equal to a full recomputation as points arrive in pieces", () => {
    const ys = Array.from({ length: 50 }, (_, i) => (i === 20 ? NaN : Math.sin(i) + 1 / (i + 1)));
    const s = new SeriesStore();
    for (let i = 0; i < 50; i += 7) {
      const part = ys.slice(i, i + 7);
      s.apply("loss", i, false, f64(part.map((_, k) => i + k)), f64(part));
    }
    const loss = s.series.get("loss");
    expect(Array.from(loss.sm.subarray(0, loss.n))).toEqual(smooth(ys));
  });

  it("matches metrics to plots like the kernel does", () => {
    expect(plotMatches("loss", "val_loss")).toBe(true);
    expect(plotMatches("acc", "test_accuracy")).toBe(true);
    expect(plotMatches("loss", "lr")).toBe(false);
  });

  it("finds the point nearest to a step", () => {
    const xs = f64([0, 10, 20, 30]);
    expect(nearestIndex(xs, 4, 14)).toBe(1);
    expect(nearestIndex(xs, 4, 26)).toBe(3);
    expect(nearestIndex(xs, 0, 1)).toBe(-1);
  });
});

describe("AlignedColumns", () => {
  it("gives one metric's points as uPlot's x, raw and smoothed columns, NaN and Inf as gaps", () => {
    const store = new SeriesStore();
    store.apply("loss", 0, false, f64([0, 1, 2, 3]), f64([4, NaN, 2, Infinity]));
    const cols = new AlignedColumns(store.matching("loss"));
    const sm = smooth([4, NaN, 2, Infinity]);
    expect(cols.data).toEqual([[0, 1, 2, 3], [4, null, 2, null], [sm[0], null, sm[2], null]]);
  });

  it("puts several metrics on the union of their steps, drawn across steps a metric has no point at", () => {
    const store = new SeriesStore();
    store.apply("loss", 0, false, f64(steps(5)), f64([5, 4, 3, 2, 1]));
    store.apply("val_loss", 0, false, f64([1.5, 4]), f64([4.5, 1.5]));
    const cols = new AlignedColumns(store.matching("loss"));
    expect(cols.data[0]).toEqual([0, 1, 1.5, 2, 3, 4]);
    expect(cols.data[1]).toEqual([5, 4, undefined, 3, 2, 1]);
    expect(cols.data[3]).toEqual([undefined, undefined, 4.5, undefined, undefined, 1.5]);
  });

  it("widens a gap to the metric's own neighbouring points when other metrics have steps in between", () => {
    const store = new SeriesStore();
    store.apply("loss", 0, false, f64(steps(6)), f64([6, 5, 4, 3, 2, 1]));
    store.apply("val_loss", 0, false, f64([0, 2, 4]), f64([6, NaN, 2]));
    const cols = new AlignedColumns(store.matching("loss"));
    expect(cols.data[3]).toEqual([6, null, null, null, 2, undefined]);
  });

  it("appends new points without rebuilding, and says when a point lies before the last step", () => {
    const store = new SeriesStore();
    store.apply("loss", 0, false, f64([0, 1]), f64([2, 1]));
    const cols = new AlignedColumns(store.matching("loss"));
    const x = cols.data[0];
    store.apply("loss", 2, false, f64([2, 3]), f64([NaN, 0.5]));
    expect(cols.append()).toBe(2);
    expect(cols.data[0]).toBe(x);
    expect(cols.data[1]).toEqual([2, 1, null, 0.5]);
    expect(cols.append()).toBe(0);
    store.apply("loss", 4, false, f64([1.5]), f64([9]));
    expect(cols.append()).toBe(-1);
    // Built anew, a step that went back is drawn in step order.
    expect(new AlignedColumns(store.matching("loss")).data[0]).toEqual([0, 1, 1.5, 2, 3]);
  });
});

describe("PlotPanel", () => {
  function panel(pattern = "loss") {
    const store = new SeriesStore();
    const el = document.createElement("div");
    document.body.appendChild(el);
    return { store, p: new PlotPanel(el, store, pattern) };
  }

  it("takes no space until one of its metrics has a point", async () => {
    const { store, p } = panel("acc");
    p.draw();
    await settled();
    expect(p.root.style.display).toBe("none");
    expect(p.plot).toBe(null);
    store.apply("loss", 0, false, f64([0]), f64([1]));
    p.draw();
    await settled();
    expect(p.root.style.display).toBe("none");
    store.apply("accuracy", 0, false, f64([0]), f64([0.5]));
    p.draw();
    await settled();
    expect(p.root.style.display).toBe("");
    expect(p.root.dataset.points).toBe("1");
  });

  it("draws each metric raw (faint) and smoothed (solid) in its colour, and grows with new points", async () => {
    const { store, p } = panel();
    store.apply("loss", 0, false, f64([0, 1, 2]), f64([3, 2, 1]));
    store.apply("val_loss", 0, false, f64([2]), f64([2.5]));
    p.draw();
    await settled();
    expect(p.plot.series.slice(1).map((s) => [s.label, s.alpha, s.width])).toEqual([
      ["loss", 0.3, 1],
      ["loss (smoothed)", 1, 1.6],
      ["val_loss", 0.3, 1],
      ["val_loss (smoothed)", 1, 1.6],
    ]);
    expect(p.root.dataset.points).toBe("4");
    const plot = p.plot;
    strokes.length = 0;
    store.apply("loss", 3, false, f64([3, 4]), f64([0.5, 0.4]));
    p.draw();
    await settled();
    expect(p.plot).toBe(plot); // new points go into the same chart
    expect(p.root.dataset.points).toBe("6");
    const lossStrokes = strokes.filter((s) => s.style === COLOURS[0]);
    // Raw and smoothed through every point, then the smoothed curve's markers (uPlot shows them while sparse).
    expect(lossStrokes.map((s) => s.segments)).toEqual([5, 5, 0]);
    expect(lossStrokes.map((s) => s.alpha)).toEqual([0.3, 1, 1]);
    expect([...p.legend.children].map((c) => c.textContent)).toEqual(["loss 0.4", "val_loss 2.5"]);
  });

  it("leaves a gap at a NaN or Inf value", async () => {
    const { store, p } = panel();
    store.apply("loss", 0, false, f64(steps(6)), f64([6, 5, NaN, 3, Infinity, 1]));
    p.draw();
    await settled();
    expect(p.plot.data[1]).toEqual([6, 5, null, 3, null, 1]);
    expect(p.plot.series[1]._paths.gaps.length).toBe(2); // uPlot clips the line there
  });

  it("zooms to a dragged range and keeps it while points arrive; double-click shows every step again", async () => {
    const { store, p } = panel();
    store.apply("loss", 0, false, f64([0, 10, 20, 30]), f64([4, 3, 2, 1]));
    p.draw();
    await settled();
    const u = p.plot;
    const px = (x) => u.valToPos(x, "x");
    // What uPlot does at the end of a drag from step 10 to step 20: the selection, then the x scale.
    u.setSelect({ left: px(10), width: px(20) - px(10), top: 0, height: u.bbox.height });
    u.setScale("x", { min: 10, max: 20 });
    expect(p.zoom[0]).toBeCloseTo(10, 6);
    expect(p.zoom[1]).toBeCloseTo(20, 6);
    expect(p.title.textContent).toBe("loss  (zoomed: double-click to reset)");
    store.apply("loss", 4, false, f64([40]), f64([0.5]));
    p.draw();
    await settled();
    expect(u.scales.x.min).toBeCloseTo(10, 6);
    expect(u.scales.x.max).toBeCloseTo(20, 6);
    u.over.dispatchEvent(new MouseEvent("dblclick"));
    await settled();
    expect(p.zoom).toBe(null);
    expect(p.title.textContent).toBe("loss");
    expect([u.scales.x.min, u.scales.x.max]).toEqual([0, 40]);
    store.apply("loss", 5, false, f64([50]), f64([0.4]));
    p.draw();
    await settled();
    expect(u.scales.x.max).toBe(50); // follows new points again
  });

  it("reads out the values at the step under the pointer", async () => {
    const { store, p } = panel();
    store.apply("loss", 0, false, f64([0, 10, 20, 30]), f64([4, 3, 2, 1]));
    store.apply("val_loss", 0, false, f64([20]), f64([2.5]));
    p.draw();
    await settled();
    p.plot.setCursor({ left: p.plot.valToPos(19, "x"), top: 10 });
    expect(p.readout.textContent).toBe(`step 20 · loss 2 (smoothed ${+smooth([4, 3, 2])[2].toPrecision(4)}) · val_loss 2.5 (smoothed 2.5)`);
    p.plot.setCursor({ left: -10, top: -10 });
    expect(p.readout.textContent).toBe("");
  });

  it("starts a new chart when a metric joins the panel or a curve is replaced", async () => {
    const { store, p } = panel();
    store.apply("loss", 0, false, f64([0, 1]), f64([2, 1]));
    p.draw();
    await settled();
    const first = p.plot;
    store.apply("val_loss", 0, false, f64([1]), f64([1.5]));
    p.draw();
    await settled();
    expect(p.plot).not.toBe(first);
    expect(p.plot.series.length).toBe(5);
    store.apply("loss", 0, true, f64([7]), f64([0.1])); // reports replace the printed loss
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
    expect(line).toBe("● running · 2 ranks · step 120/1000 · 5,320 samples/s · 1:23 elapsed · ETA 1:40");
  });
});
