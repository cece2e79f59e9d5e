// A finished cell's view, drawn from the data saved in the notebook (the output's
// application/vnd.jupyter-hvd.view+json, jupyter_hvd/widgets/static_plot.py view_data): the same view as the live
// widget's, with no kernel and no widget model. labextension/src/mime.ts renders that output type with it.
import { Store } from "./store.js";
import { mountView } from "./view.js";

export const MIME = "application/vnd.jupyter-hvd.view+json";

/** Draw the saved view `data` into `el`; returns a function that takes it down. */
export function renderSaved(el, data) {
  const view = mountView(el, Store.fromSaved(data), {
    plots: data.plots ?? ["all"],
    ranks: data.ranks ?? [0],
    smoothing: data.smoothing ?? null,
    logY: !!data.log_y,
  });
  return () => view.destroy();
}
