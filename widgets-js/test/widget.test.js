// The widget as anywidget runs it: initialize() on the model, render() into an element, updates by message.
import { describe, expect, it } from "vitest";
import widget from "../../jupyter_hvd/widgets/static/live_view.js";

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
      log: { append: lines.map((l) => [l, "stdout"]), partials: [[partial, "stderr"]], total: seq },
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

  it("asks for a full copy when created after the cell ended (a reloaded page)", () => {
    const model = fakeModel({ view_id: "v2", plots: ["loss"], log_lines: 100, updates: 12 });
    widget.initialize({ model });
    expect(model.sent).toEqual([{ type: "sync" }]);
  });
});
