// The live training view of a `%%hvd` cell (anywidget ESM; bundled with uPlot into
// jupyter_hvd/widgets/static/live_view.js by widgets-js/build.mjs, so it needs no CDN).
// The kernel sends incremental "update" messages (jupyter_hvd/widgets/live_view.py): new log lines, new curve
// points (float64 buffers), the status. They are kept per model (a Store), so every view of the widget, even one
// created later, draws the same data. The user's smoothing and log-scale choices go back to the kernel, which keeps
// them in the saved copies of the view.
//
// The cell's output is a copy of the view as data, with this widget beside it in the same output (live.js): where
// jupyter-hvd's renderer is installed (JupyterLab, Notebook 7) it draws that output from this model's store while the
// model is on the page; other widget front ends (VS Code) draw the widget itself (render below).
import { publishLive, withdrawLive } from "./live.js";
import { Store } from "./store.js";
import { mountView } from "./view.js";

export { Store };

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

/** The view's settings as mountView takes them, read from the model; the user's changes go back to it. */
function configOf(model) {
  return {
    plots: model.get("plots"),
    ranks: model.get("ranks") ?? [0],
    smoothing: model.get("smoothing") ?? null,
    logY: model.get("log_y") ?? false,
    onSettings: ({ smoothing, logY }) => {
      model.set("smoothing", smoothing);
      model.set("log_y", logY);
      try {
        model.save_changes?.();
      } catch (e) {
        // The kernel closed the widget when the cell ended (ipywidgets keeps the model "live" and throws a string
        // here): the cell's saved output is final, so the choice stays with the views on this page.
        if (!String(e).includes("no comm channel")) throw e;
      }
    },
  };
}

function initialize({ model }) {
  const id = model.get("view_id");
  const store = storeFor(model);
  const onMessage = (msg, buffers) => {
    if (!store.handle(msg, buffers || [])) model.send({ type: "sync" });
  };
  model.on("msg:custom", onMessage);
  // A model restored after the cell ended (page reload) has seen none of the updates: ask for a copy.
  if (model.get("updates") > 0 && store.seq === 0) model.send({ type: "sync" });
  const live = { store, config: () => configOf(model) };
  publishLive(id, live);
  return () => {
    model.off("msg:custom", onMessage);
    STORES.delete(id);
    withdrawLive(id, live);
  };
}

function render({ model, el }) {
  const view = mountView(el, storeFor(model), configOf(model));
  return () => view.destroy();
}

export default { initialize, render };
