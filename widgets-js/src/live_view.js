// The live training view of a `%%hvd` cell (anywidget ESM; bundled with uPlot into
// jupyter_hvd/widgets/static/live_view.js by widgets-js/build.mjs, so it needs no CDN).
// The kernel sends incremental "update" messages (jupyter_hvd/widgets/live_view.py): new log lines, new curve
// points (float64 buffers), the status. They are kept per model (a Store), so every view of the widget, even one
// created later, draws the same data. Drawing is coalesced to one frame per animation tick.
import "uplot/dist/uPlot.min.css";
import "./live_view.css";
import { formatStatus } from "./format.js";
import { LogModel, LogView } from "./log.js";
import { PlotPanel } from "./plot.js";
import { SeriesStore } from "./series.js";

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
    for (const p of panels) p.destroy();
  };
}

export default { initialize, render };
