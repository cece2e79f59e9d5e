// A %%hvd cell's output drawn from its data (application/vnd.jupyter-hvd.view+json, jupyter_hvd/widgets/
// static_plot.py view_data): the same view as the live widget's, with no kernel and no widget model.
// labextension/src/mime.ts renders that output type with OutputView. While the cell runs the output is a copy the
// kernel refreshes, and the live widget of the same view (live.js) is on the page: OutputView draws the widget's
// data then, as it arrives, and keeps drawing it when the cell ends (the view stays where the user left it).
import { liveView, onLiveViews } from "./live.js";
import { Store } from "./store.js";
import { mountView } from "./view.js";

/** @typedef {import("jupyter-hvd-live-view/messages").SavedView} SavedView */

export const MIME = "application/vnd.jupyter-hvd.view+json";
// How long a running cell's copy waits for its live widget (its model is created as the output comes, or restored
// from the kernel after a page reload) before it says it is a copy saved while the cell ran.
export const LIVE_GRACE_MS = 3000;

/** Draw the saved view `data` into `el` (`pending`: a running cell's copy whose widget may still come, which does
 * not say yet that it was saved); returns a function that takes it down.
 * @param {HTMLElement} el
 * @param {SavedView} data
 * @param {boolean} [pending]
 * @returns {() => void} */
export function renderSaved(el, data, pending = false) {
  const view = mountView(el, Store.fromSaved(data), {
    plots: data.plots ?? ["all"],
    ranks: data.ranks ?? [0],
    smoothing: data.smoothing ?? null,
    logY: !!data.log_y,
    pending,
  });
  return () => view.destroy();
}

/** One output of a %%hvd cell in `el`: render(data) with each copy the kernel sends, destroy() when it goes.
 * `graceMs`: how long a running cell's copy waits for its widget before it says it is a copy. */
export class OutputView {
  /** @param {HTMLElement} el @param {number} [graceMs] */
  constructor(el, graceMs = LIVE_GRACE_MS) {
    /** @private */
    this.el = el;
    /** @private */
    this.graceMs = graceMs;
    /** @private @type {SavedView | null} */
    this.data = null;
    this.mounted = null; // { live: the live view drawn, or null for the saved data; takeDown() }
    this.waiting = null; // a live store that has no data yet: drawn at its first update
    this.since = Date.now();
    this.graceTimer = null;
    this.stopListening = onLiveViews((id) => {
      if (id === this.data?.view_id) this.refresh(false);
    });
  }

  /** @param {SavedView} data */
  render(data) {
    this.data = data;
    this.refresh(true);
  }

  /** Draw the live view where it is on the page and has data, else the saved data (`fresh`: a new copy came). */
  refresh(fresh) {
    const live = this.data?.view_id ? liveView(this.data.view_id) : null;
    if (live && live.store.status) {
      if (this.mounted?.live !== live) this.mount(live);
      return;
    }
    if (live) this.awaitData(live);
    const shown = this.mounted?.live;
    // The widget went away (the cell ended, its model closed): its data is the whole run, the copy a thinned one.
    if (shown && (!fresh || shown.store.status?.state !== "running")) return;
    const pending = this.data?.view_id && this.data?.status?.state === "running" && this.age() < this.graceMs;
    if (fresh || !this.mounted || (this.mounted.pending && !pending)) this.mount(null, !!pending);
    if (pending && !this.graceTimer) {
      this.graceTimer = setTimeout(() => {
        this.graceTimer = null;
        this.refresh(false);
      }, this.graceMs - this.age() + 10);
    }
  }

  age() {
    return Date.now() - this.since;
  }

  /** Draw the live view once its store has its first update (a model just created asks the kernel for a copy). */
  awaitData(live) {
    if (this.waiting === live) return;
    this.stopWaiting();
    const once = () => {
      this.stopWaiting();
      this.refresh(false);
    };
    live.store.listeners.add(once);
    this.waiting = live;
    this.stopWaitingFn = () => live.store.listeners.delete(once);
  }

  stopWaiting() {
    this.stopWaitingFn?.();
    this.stopWaitingFn = null;
    this.waiting = null;
  }

  mount(live, pending = false) {
    this.mounted?.takeDown();
    this.el.replaceChildren();
    if (live) {
      const view = mountView(this.el, live.store, live.config());
      this.mounted = { live, pending: false, takeDown: () => view.destroy() };
    } else {
      this.mounted = { live: null, pending, takeDown: renderSaved(this.el, this.data, pending) };
    }
  }

  destroy() {
    clearTimeout(this.graceTimer);
    this.stopListening();
    this.stopWaiting();
    this.mounted?.takeDown();
    this.mounted = null;
  }
}
