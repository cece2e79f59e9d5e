// The live widgets on this page, by view id. A running cell's output is a copy of its view as data (the kernel
// refreshes it, so a notebook saved mid-run keeps the run up to then); jupyter-hvd's renderer of that output
// (saved.js OutputView, labextension/src/mime.ts) draws it from the live widget's data while the widget is on the
// page. The widget's bundle (anywidget's copy of live_view.js) and the labextension's are separate modules: they
// meet on a global, under a key that names this protocol's version (a view from another version is not used).
const KEY = Symbol.for("jupyter-hvd.live-views.v1");

function registry() {
  globalThis[KEY] ??= { views: new Map(), listeners: new Set() };
  return globalThis[KEY];
}

/**
 * Make the live view `viewId` known to this page: `live` is { store, config() }, config() the view's settings as
 * mountView takes them (plots, ranks, smoothing, logY, onSettings).
 */
export function publishLive(viewId, live) {
  const r = registry();
  r.views.set(viewId, live);
  for (const listener of [...r.listeners]) listener(viewId);
}

/** The live view `viewId` left the page (its widget was closed). */
export function withdrawLive(viewId, live) {
  const r = registry();
  if (r.views.get(viewId) !== live) return;
  r.views.delete(viewId);
  for (const listener of [...r.listeners]) listener(viewId);
}

/** The live view `viewId`, or null where its widget is not on this page. */
export function liveView(viewId) {
  return registry().views.get(viewId) ?? null;
}

/** Call `listener(viewId)` whenever a live view comes or goes; returns what stops it. */
export function onLiveViews(listener) {
  const r = registry();
  r.listeners.add(listener);
  return () => r.listeners.delete(listener);
}
