// The view of a %%hvd cell, live or finished: the status line, the smoothing slider and the log-scale switch, one
// plot panel per metric family (or per --plot pattern), and the log. live_view.js mounts it on a widget's store,
// saved.js on a finished cell's saved data; both look and behave alike.
import "uplot/dist/uPlot.min.css";
import "./live_view.css";
import { formatStatus } from "./format.js";
import { LogView } from "./log.js";
import { PlotPanel } from "./plot.js";
import { panels } from "./series.js";
import { SMOOTHING, SMOOTH_FROM, smoothingFor } from "./smooth.js";

const AUTO_SMOOTHING = `automatic: ${SMOOTHING} (TensorBoard's weight, debiased) from ${SMOOTH_FROM} points on, off below; learning rates and other schedules, accuracies and other bounded metrics as they are; double-click: automatic again`;

/**
 * Draw `store` into `el`. `config`: plots (the --plot patterns, or ["all"]), ranks (the shown ranks), smoothing (null:
 * automatic, else the weight), logY, onSettings ({smoothing, logY} => void, when the user changes them), pending (a
 * saved copy of a running cell whose live widget may still come: it does not say yet that it is a copy).
 * Returns { schedule(logChange), destroy() }: schedule() redraws at the next animation frame.
 */
export function mountView(el, store, config) {
  const doc = el.ownerDocument;
  const settings = {
    smoothing: config.smoothing ?? null,
    logY: !!config.logY,
    manyRanks: (config.ranks ?? [0]).length > 1,
  };
  const root = doc.createElement("div");
  root.className = "jhvd-live";
  const statusEl = doc.createElement("div");
  statusEl.className = "jhvd-status";
  const activityEl = doc.createElement("div"); // what the ranks do while the cell is quiet (the kernel's words)
  activityEl.className = "jhvd-activity";
  const tools = doc.createElement("div");
  tools.className = "jhvd-tools";
  tools.style.display = "none";
  const smoothLabel = doc.createElement("label");
  smoothLabel.className = "jhvd-smoothing";
  smoothLabel.append("smoothing ");
  const slider = doc.createElement("input");
  slider.type = "range";
  slider.min = "0";
  slider.max = "0.99";
  slider.step = "0.01";
  slider.setAttribute("aria-label", "smoothing");
  const smoothValue = doc.createElement("output");
  smoothLabel.append(slider, smoothValue);
  const logButton = doc.createElement("button");
  logButton.type = "button";
  logButton.className = "jhvd-toggle";
  logButton.textContent = "log scale";
  tools.append(smoothLabel, logButton);
  const grid = doc.createElement("div");
  grid.className = "jhvd-panels";
  root.append(statusEl, activityEl, tools, grid);
  const log = new LogView(root, store.log, config.ranks ?? [0]);
  el.appendChild(root);

  const plots = config.plots ?? ["all"];
  const panelsByTitle = new Map();
  const showSettings = () => {
    const auto = settings.smoothing === null;
    // Automatic: the weight the curves that are smoothed get (none: off).
    const weight = auto
      ? Math.max(0, ...[...store.series.series.values()].map((s) => smoothingFor(s.n, null, s.name)))
      : settings.smoothing;
    slider.value = String(weight);
    smoothValue.textContent = weight > 0 ? weight.toFixed(2) : "off";
    smoothLabel.title = auto ? AUTO_SMOOTHING : "the weight of the moving average (TensorBoard's, debiased); 0 is off";
    smoothLabel.dataset.auto = String(auto);
    logButton.setAttribute("aria-pressed", String(settings.logY));
    root.dataset.smoothing = String(weight);
  };
  const changed = () => {
    showSettings();
    for (const p of panelsByTitle.values()) p.showTitle();
    schedule(null);
    config.onSettings?.({ smoothing: settings.smoothing, logY: settings.logY });
  };
  slider.addEventListener("input", () => {
    settings.smoothing = Number(slider.value);
    changed();
  });
  smoothLabel.addEventListener("dblclick", () => {
    settings.smoothing = null; // back to automatic
    changed();
  });
  logButton.addEventListener("click", () => {
    settings.logY = !settings.logY;
    changed();
  });

  let frame = null;
  let logChanges = [];
  const paint = () => {
    frame = null;
    statusEl.textContent = formatStatus(store.status, store.elapsed(), store.saved && !config.pending);
    root.dataset.state = store.status?.state ?? "running";
    root.dataset.saved = String(store.saved);
    statusEl.dataset.elapsed = String(store.status?.elapsed ?? ""); // the cell's time when the kernel said it (tests)
    const activity = store.status?.state === "running" && !store.saved ? store.status?.activity : null;
    activityEl.textContent = activity ?? "";
    activityEl.style.display = activity ? "" : "none";
    const wanted = panels(store.series.names(), plots);
    for (const [title, names] of wanted) {
      let panel = panelsByTitle.get(title);
      if (!panel) {
        panel = new PlotPanel(grid, store.series, title, settings);
        panelsByTitle.set(title, panel);
      }
      panel.setNames(names);
    }
    const shown = wanted.filter(([, names]) => names.length).length;
    grid.dataset.panels = String(shown);
    for (const p of panelsByTitle.values()) p.draw();
    tools.style.display = shown ? "" : "none";
    showSettings();
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
    if (store.status?.state === "running" && !store.saved) statusEl.textContent = formatStatus(store.status, store.elapsed());
  }, 1000);
  logChanges.push({ reset: true });
  paint();
  return {
    schedule,
    destroy() {
      store.listeners.delete(schedule);
      clearInterval(tick);
      log.destroy();
      for (const p of panelsByTitle.values()) p.destroy();
      root.remove();
    },
  };
}
