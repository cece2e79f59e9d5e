// The widget as anywidget runs it: initialize() on the model, render() into an element, updates by message.
import { describe, expect, it } from "vitest";
import widget, { Store } from "../src/live_view.js";

function fakeModel(state) {
  const handlers = new Map();
  const sent = [];
  return {
    sent,
    get: (k) => state[k],
    on: (name, f) => handlers.set(name, f),
    off: (name) => handlers.delete(name),
    send: (m) => sent.push(m),
    emit: (name, ...args) => handlers.get(name)?.(...args),
  };
}

const f64 = (a) => new Float64Array(a).buffer;
const frame = () => new Promise((r) => setTimeout(r, 40));

describe("the live view widget", () => {
  it("draws the status, plot and log from incremental updates", async () => {
    const model = fakeModel({ view_id: "v1", plots: ["loss"], log_lines: 100, updates: 0 });
    widget.initialize({ model });
    const el = document.createElement("div");
    document.body.appendChild(el);
    widget.render({ model, el });
    const update = (seq, start, xs, ys, lines, partial) => ({
      type: "update",
      seq,
      full: false,
      curves: [{ name: "loss", start, reset: false, n: xs.length }],
      log: { append: lines.map((l) => [l, "stdout", 0]), partials: [[partial, "stderr", 0]], total: seq },
      status: { state: "running", ranks: 2, step: xs.at(-1), total: 10, samples_per_s: 64, eta: 3, elapsed: 1 },
    });
    model.emit("msg:custom", update(1, 0, [0, 1], [2, 1.5], ["epoch 0"], " 20%|##"), [f64([0, 1]), f64([2, 1.5])]);
    await frame();
    expect(el.querySelector(".jhvd-plot").dataset.points).toBe("2");
    model.emit("msg:custom", update(2, 2, [2], [1.2], ["epoch 1"], " 30%|###"), [f64([2]), f64([1.2])]);
    await frame();
    expect(el.querySelector(".jhvd-plot").dataset.points).toBe("3");
    expect([...el.querySelectorAll(".jhvd-log-lines .jhvd-line")].map((d) => d.textContent)).toEqual([
      "epoch 0",
      "epoch 1",
    ]);
    expect(el.querySelectorAll(".jhvd-partial").length).toBe(1);
    expect(el.querySelector(".jhvd-status").textContent).toMatch(/^● running · 2 ranks · step 2\/10 · 64 samples\/s/);
    expect(model.sent).toEqual([]);
    model.emit("msg:custom", update(5, 9, [9], [1], [], ""), [f64([9]), f64([1])]);
    expect(model.sent).toEqual([{ type: "sync" }]); // a missed update: ask the kernel for a full copy
  });

  it("draws one panel per --plot pattern, each shown once one of its metrics has a point", async () => {
    const model = fakeModel({ view_id: "v3", plots: ["loss", "acc"], log_lines: 100, updates: 0 });
    widget.initialize({ model });
    const el = document.createElement("div");
    document.body.appendChild(el);
    widget.render({ model, el });
    const update = (seq, curves) => ({
      type: "update",
      seq,
      full: false,
      curves: curves.map(([name, start, xs]) => ({ name, start, reset: false, n: xs.length })),
      log: null,
      status: { state: "running", ranks: 2, step: 1, elapsed: 1 },
    });
    const panels = () => [...el.querySelectorAll(".jhvd-plot")].map((p) => [p.style.display, p.dataset.points]);
    model.emit("msg:custom", update(1, [["loss", 0, [0, 1]], ["val_loss", 0, [1]]]), [
      f64([0, 1]), f64([2, 1]), f64([1]), f64([1.5]),
    ]);
    await frame();
    expect(panels()).toEqual([["", "3"], ["none", "0"]]);
    expect(el.querySelectorAll(".jhvd-plot .uplot").length).toBe(1);
    model.emit("msg:custom", update(2, [["accuracy", 0, [1]]]), [f64([1]), f64([0.4])]);
    await frame();
    expect(panels()).toEqual([["", "3"], ["", "1"]]);
    expect([...el.querySelectorAll(".jhvd-legend")].map((l) => l.textContent)).toEqual([
      "loss 1val_loss 1.5",
      "accuracy 0.4",
    ]);
  });

  it("says under the status line what the ranks do while the cell is quiet, and no longer once it ended", async () => {
    const model = fakeModel({ view_id: "v4", plots: ["all"], log_lines: 100, updates: 0 });
    widget.initialize({ model });
    const el = document.createElement("div");
    document.body.appendChild(el);
    widget.render({ model, el });
    const update = (seq, state, activity) => ({
      type: "update",
      seq,
      full: false,
      curves: [],
      log: null,
      status: { state, ranks: 2, elapsed: 7, activity },
    });
    const activity = () => el.querySelector(".jhvd-activity");
    expect(activity().style.display).toBe("none");
    const said = "no output yet; where the ranks are:\nrank 0: waiting in allreduce 'grad' (Cell In[7], line 6)";
    model.emit("msg:custom", update(1, "running", said), []);
    await frame();
    expect([activity().textContent, activity().style.display]).toEqual([said, ""]);
    model.emit("msg:custom", update(2, "done", said), []);
    await frame();
    expect(activity().style.display).toBe("none");
  });

  it("asks for a full copy when created after the cell ended (a reloaded page)", () => {
    const model = fakeModel({ view_id: "v2", plots: ["loss"], log_lines: 100, updates: 12 });
    widget.initialize({ model });
    expect(model.sent).toEqual([{ type: "sync" }]);
  });
});

describe("Store", () => {
  it("applies updates with binary buffers and asks for a copy after a missed one", () => {
    const store = new Store(100);
    const buf = (a) => new DataView(new Float64Array(a).buffer);
    const msg = (seq, start, xs, ys) => ({
      type: "update",
      seq,
      full: false,
      curves: [{ name: "loss", start, reset: false, n: xs.length }],
      log: { append: [[`seq ${seq}`, "stdout", 0]], partials: [], total: seq },
      status: { state: "running", ranks: 2, step: xs.at(-1), elapsed: 1 },
    });
    expect(store.handle(msg(1, 0, [0, 1], [2, 1]), [buf([0, 1]), buf([2, 1])])).toBe(true);
    expect(store.handle(msg(2, 2, [2], [0.5]), [buf([2]), buf([0.5])])).toBe(true);
    expect(store.series.series.get("loss@0").n).toBe(3);
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
    store.handle(msg(1, 0), [f64([0]), f64([2])]);
    store.handle(msg(2, 1), [new DataView(f64([1])), shifted]);
    store.handle(msg(3, 2), [new Float64Array([2]), new Float64Array([3])]);
    const loss = store.series.series.get("loss@0");
    expect(Array.from(loss.y.subarray(0, loss.n))).toEqual([2, 1.5, 3]);
  });
});

/** A widget view of 30 loss points from a cell in `cellState`, whose model saves its settings with `saveChanges`. */
async function viewOfLoss(viewId, cellState, saveChanges) {
  const state = { view_id: viewId, plots: ["all"], ranks: [0], log_lines: 100, updates: 0, smoothing: null, log_y: false };
  const model = { ...fakeModel(state), set: (k, v) => (state[k] = v), save_changes: () => saveChanges(state) };
  widget.initialize({ model });
  const el = document.createElement("div");
  document.body.appendChild(el);
  widget.render({ model, el });
  const xs = Array.from({ length: 30 }, (_, i) => i);
  const msg = {
    type: "update", seq: 1, full: false, log: null, status: { state: cellState, ranks: 2, elapsed: 1 },
    curves: [{ key: "loss@0", name: "loss", rank: 0, x_kind: "step", start: 0, reset: false, n: 30 }],
  };
  model.emit("msg:custom", msg, [f64(xs), f64(xs.map((i) => 1 / (i + 1)))]);
  await frame();
  return { el, state };
}

describe("the user's choices", () => {
  it("sends the smoothing slider and the log scale to the kernel, which keeps them in the finished view", async () => {
    const { el, state } = await viewOfLoss("v4", "running", (s) => (s.saved = true));
    expect(el.querySelector(".jhvd-smoothing output").textContent).toBe("0.60"); // automatic from 20 points
    const slider = el.querySelector(".jhvd-smoothing input");
    slider.value = "0.9";
    slider.dispatchEvent(new Event("input"));
    el.querySelector(".jhvd-toggle").click();
    expect([state.smoothing, state.log_y, state.saved]).toEqual([0.9, true, true]);
    await frame();
    expect(el.querySelector(".jhvd-plot-title").textContent).toBe("loss (log scale)");
  });

  it("keeps the log scale on the page where the kernel closed the widget (the cell ended), and throws nothing", async () => {
    const { el } = await viewOfLoss("v5", "done", () => {
      throw "Syncing error: no comm channel defined"; // what ipywidgets throws once the kernel closed the comm
    });
    expect(() => el.querySelector(".jhvd-toggle").click()).not.toThrow();
    await frame();
    expect(el.querySelector(".jhvd-plot-title").textContent).toBe("loss (log scale)");
  });
});

describe("the finished view", () => {
  it("draws a saved cell's curves, status and log from its data, with no kernel", async () => {
    const { renderSaved } = await import("../src/saved.js");
    const el = document.createElement("div");
    document.body.appendChild(el);
    renderSaved(el, {
      version: 1,
      plots: ["all"],
      ranks: [0, 1],
      smoothing: null,
      log_y: false,
      status: { state: "done", ranks: 2, step: 2, total: 3, elapsed: 4, text: "finished" },
      curves: [
        { name: "loss", rank: 0, x_kind: "epoch", x: [0, 1, 2], y: [1, null, 0.25], points: 3 },
        { name: "acc", rank: 0, x_kind: "epoch", x: [0, 1, 2], y: [0.5, 0.7, 0.8], points: 3 },
      ],
      log: { append: [["epoch 0", "stdout", 0], ["hello from 1", "stdout", 1]], partials: [], total: 2 },
    });
    await frame();
    const panels = [...el.querySelectorAll(".jhvd-plot")].map((p) => [p.dataset.panel, p.dataset.points, p.dataset.xLabel]);
    expect(panels).toEqual([["loss", "3", "epoch"], ["acc", "3", "epoch"]]);
    expect(JSON.parse(el.querySelector(".jhvd-plot").dataset.last)["loss@0"]).toBe(0.25);
    expect(el.querySelector(".jhvd-status").textContent).toBe("✓ finished · 2 ranks · step 2/3 · 0:04 elapsed");
    expect([...el.querySelectorAll(".jhvd-tab")].map((t) => t.textContent)).toEqual(["all ranks", "rank 0", "rank 1"]);
  });
});

describe("a cell's output (OutputView): the copy the kernel refreshes, drawn from the live widget while it is here", () => {
  const copy = (state, viewId, points, elapsed = 7) => ({
    version: 1,
    plots: ["all"],
    ranks: [0],
    smoothing: null,
    log_y: false,
    view_id: viewId,
    status: { state, ranks: 2, step: points - 1, elapsed, text: "" },
    curves: [{ name: "loss", rank: 0, x_kind: "step", x: [...Array(points).keys()], y: [...Array(points).keys()].map((i) => 1 / (i + 1)), points }],
    log: { append: [...Array(points).keys()].map((i) => [`step ${i}`, "stdout", 0]), partials: [], total: points },
  });
  const look = (el) => ({
    points: el.querySelector(".jhvd-plot")?.dataset.points,
    status: el.querySelector(".jhvd-status")?.textContent,
    lines: el.querySelectorAll(".jhvd-log-lines .jhvd-line").length,
  });

  it("draws a notebook saved mid-run as a copy saved while running, once no widget came", async () => {
    const { OutputView } = await import("../src/saved.js");
    const el = document.createElement("div");
    document.body.appendChild(el);
    const view = new OutputView(el, 500);
    view.render(copy("running", "gone", 5)); // drawn at once; its widget may still come (a cell just started)
    expect(look(el)).toEqual({ points: "5", status: "● running · 2 ranks · step 4 · 0:07 elapsed", lines: 5 });
    await new Promise((r) => setTimeout(r, 700)); // no widget of this view came
    await frame();
    expect(look(el)).toEqual({ points: "5", status: "◌ saved while running · 2 ranks · step 4 · 0:07 elapsed", lines: 5 });
    await new Promise((r) => setTimeout(r, 1100));
    expect(look(el).status).toContain("0:07 elapsed"); // a copy's time stands still
    view.destroy();
  });

  it("draws the live widget's data while the widget is on the page, and keeps it when the cell ends", async () => {
    const { OutputView } = await import("../src/saved.js");
    const model = fakeModel({ view_id: "live-1", plots: ["all"], ranks: [0], log_lines: 100, updates: 0 });
    const el = document.createElement("div");
    document.body.appendChild(el);
    const view = new OutputView(el, 60);
    view.render(copy("running", "live-1", 2, 0)); // the output comes before the widget's model is ready
    await frame();
    expect(look(el).points).toBe("2");
    const takeDown = widget.initialize({ model });
    const update = (seq, start, n, state = "running") => ({
      type: "update", seq, full: false, log: { append: [[`step ${start}`, "stdout", 0]], partials: [], total: seq },
      status: { state, ranks: 2, step: start + n - 1, elapsed: seq },
      curves: [{ key: "loss@0", name: "loss", rank: 0, x_kind: "step", start, reset: false, n }],
    });
    const xs = (start, n) => f64([...Array(n).keys()].map((i) => start + i));
    model.emit("msg:custom", update(1, 0, 30), [xs(0, 30), xs(0, 30)]);
    await frame();
    expect(look(el).points).toBe("30"); // the live data, not the copy's 2 points
    const root = el.querySelector(".jhvd-live");
    view.render(copy("running", "live-1", 25)); // a newer copy: the live view stays as it is
    model.emit("msg:custom", update(2, 30, 10, "done"), [xs(30, 10), xs(30, 10)]);
    await frame();
    expect(el.querySelector(".jhvd-live")).toBe(root);
    expect(look(el)).toEqual({ points: "40", status: "✓ finished · 2 ranks · step 39 · 0:02 elapsed", lines: 2 });
    takeDown(); // the widget is closed when the cell ends; then the final copy comes
    view.render({ ...copy("done", null, 40), view_id: null });
    await frame();
    expect(el.querySelector(".jhvd-live")).toBe(root); // the whole run stays drawn, where the user left it
    view.destroy();
  });
});
