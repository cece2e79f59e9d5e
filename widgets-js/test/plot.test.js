// The live view's plot component: incremental points, smoothing, decimation, zoom and hover readout.
import { describe, expect, it } from "vitest";
import {
  PlotPanel,
  SeriesStore,
  Store,
  decimate,
  formatStatus,
  nearestIndex,
  niceTicks,
  plotMatches,
  smooth,
} from "../../jupyter_hvd/widgets/static/live_view.js";

const f64 = (a) => new Float64Array(a);

function recordingContext() {
  const calls = { lineTo: 0, fillText: [] };
  const ctx = new Proxy(
    {},
    {
      get(target, prop) {
        if (prop in target) return target[prop];
        if (prop === "lineTo") return () => (calls.lineTo += 1);
        if (prop === "fillText") return (t) => calls.fillText.push(t);
        return () => {};
      },
      set(target, prop, value) {
        target[prop] = value;
        return true;
      },
    },
  );
  return { ctx, calls };
}

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
    const ys = Array.from({ length: 50 }, (_, i) => Math.sin(i) + 1 / (i + 1));
    const s = new SeriesStore();
    for (let i = 0; i < 50; i += 7) {
      const part = ys.slice(i, i + 7);
      s.apply("loss", i, false, f64(part.map((_, k) => i + k)), f64(part));
    }
    const loss = s.series.get("loss");
    const expected = smooth(ys);
    Array.from(loss.sm.subarray(0, loss.n)).forEach((v, i) => expect(v).toBeCloseTo(expected[i], 12));
  });

  it("matches metrics to plots like the kernel does", () => {
    expect(plotMatches("loss", "val_loss")).toBe(true);
    expect(plotMatches("acc", "test_accuracy")).toBe(true);
    expect(plotMatches("loss", "lr")).toBe(false);
  });
});

describe("drawing helpers", () => {
  it("decimates many points to at most two per pixel column, keeping the extremes", () => {
    const n = 100000;
    const xs = f64(Array.from({ length: n }, (_, i) => i));
    const ys = f64(Array.from({ length: n }, (_, i) => (i === 54321 ? 100 : Math.sin(i))));
    const picks = decimate(xs, ys, n, 0, n - 1, 500);
    expect(picks.length).toBeLessThanOrEqual(1002);
    expect(picks).toContain(54321);
  });

  it("finds the nearest point and round ticks", () => {
    const xs = f64([0, 10, 20, 30]);
    expect(nearestIndex(xs, 4, 14)).toBe(1);
    expect(nearestIndex(xs, 4, 26)).toBe(3);
    expect(niceTicks(0, 1, 5)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
  });

  it("formats the status line", () => {
    const line = formatStatus(
      { state: "running", ranks: 2, step: 120, total: 1000, samples_per_s: 5320.4, eta: 100, elapsed: 0 },
      83,
    );
    expect(line).toBe("● running · 2 ranks · step 120/1000 · 5,320 samples/s · 1:23 elapsed · ETA 1:40");
  });
});

describe("PlotPanel", () => {
  function panel() {
    const store = new SeriesStore();
    const el = document.createElement("div");
    const p = new PlotPanel(el, store, "loss");
    const rec = recordingContext();
    p.canvas.getContext = () => rec.ctx;
    return { store, p, rec };
  }

  it("draws raw and smoothed lines and grows with new points", () => {
    const { store, p, rec } = panel();
    store.apply("loss", 0, false, f64([0, 1, 2]), f64([3, 2, 1]));
    p.draw();
    expect(p.root.dataset.points).toBe("3");
    const firstDraw = rec.calls.lineTo;
    store.apply("loss", 3, false, f64([3, 4]), f64([0.5, 0.4]));
    p.draw();
    expect(p.root.dataset.points).toBe("5");
    expect(rec.calls.lineTo - firstDraw).toBeGreaterThan(firstDraw); // more segments than the first draw
    expect(rec.calls.fillText.some((t) => String(t).startsWith("loss 0.4"))).toBe(true);
  });

  it("zooms to a dragged range, resets on double-click, and reads out values under the pointer", () => {
    const { store, p } = panel();
    store.apply("loss", 0, false, f64([0, 10, 20, 30]), f64([4, 3, 2, 1]));
    p.draw();
    const pxOf = (x) => 52 + (x / 30) * (p.width - 64);
    p.drag = { from: 10, to: 20 }; // what mousedown at x=10 and mousemove to x=20 leave
    p.canvas.dispatchEvent(new MouseEvent("mouseup"));
    expect(p.xRange()).toEqual([10, 20]);
    p.canvas.dispatchEvent(new MouseEvent("dblclick"));
    expect(p.zoom).toBe(null);
    expect(p.xRange()).toEqual([0, 30]);
    expect(p.readoutText(p.xAt(pxOf(19)))).toMatch(/^step 20 · loss 2 \(smoothed [0-9.]+\)$/);
  });
});

describe("Store", () => {
  it("applies updates with binary buffers and asks for a copy after a missed one", () => {
    const store = new Store(100);
    const buf = (a) => new DataView(f64(a).buffer);
    const msg = (seq, start, xs, ys) => ({
      type: "update",
      seq,
      full: false,
      curves: [{ name: "loss", start, reset: false, n: xs.length }],
      log: { append: [[`seq ${seq}`, "stdout"]], partials: [], total: seq },
      status: { state: "running", ranks: 2, step: xs.at(-1), elapsed: 1 },
    });
    expect(store.handle(msg(1, 0, [0, 1], [2, 1]), [buf([0, 1]), buf([2, 1])])).toBe(true);
    expect(store.handle(msg(2, 2, [2], [0.5]), [buf([2]), buf([0.5])])).toBe(true);
    expect(store.series.series.get("loss").n).toBe(3);
    expect(store.handle(msg(4, 5, [5], [0.1]), [buf([5]), buf([0.1])])).toBe(false);
  });
});

describe("Store buffers", () => {
  it("accepts ArrayBuffers, DataViews and typed arrays at any offset", () => {
    const store = new Store(10);
    const bytes = new Uint8Array(8 * 3 + 4);
    new DataView(bytes.buffer).setFloat64(4, 1.5, true);
    const shifted = new DataView(bytes.buffer, 4, 8);
    const msg = (seq, start) => ({
      type: "update",
      seq,
      full: false,
      curves: [{ name: "loss", start, reset: false, n: 1 }],
      log: null,
      status: { state: "running", ranks: 1, elapsed: 0 },
    });
    store.handle(msg(1, 0), [f64([0]).buffer, f64([2]).buffer]);
    store.handle(msg(2, 1), [new DataView(f64([1]).buffer), shifted]);
    store.handle(msg(3, 2), [f64([2]), f64([3])]);
    const loss = store.series.series.get("loss");
    expect(Array.from(loss.y.subarray(0, loss.n))).toEqual([2, 1.5, 3]);
  });
});
