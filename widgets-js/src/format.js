// The status line's text, and numbers as the plot's legend, axes and readout show them.

/** Four significant digits, or an exponent for tiny and huge values; NaN and infinities by name. */
export function formatNumber(v) {
  if (!Number.isFinite(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(2);
  return +v.toPrecision(4) + "";
}

/** A rate with three significant digits: 4.37, 0.0123, 1,234 (as live_view.py steps_per_second_text). */
export function formatRate(v) {
  if (!Number.isFinite(v)) return String(v);
  if (Math.abs(v) >= 100) return Math.round(v).toLocaleString("en-US");
  return +v.toPrecision(3) + "";
}

/** A whole number with thousands separators (steps, epochs on an axis); other numbers as formatNumber. */
export function formatTick(v) {
  return Number.isInteger(v) ? v.toLocaleString("en-US") : formatNumber(v);
}

/** `m:ss`, or `h:mm:ss` from an hour on. */
export function formatDuration(seconds) {
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const pad = (v) => String(v).padStart(2, "0");
  return h ? `${h}:${pad(m)}:${pad(s % 60)}` : `${m}:${pad(s % 60)}`;
}

/** The status line: state, ranks, the bar's description, step (or epoch and the steps counted), samples/s or
 * steps/s, elapsed, ETA. `saved`: a copy kept in the notebook, which says when a cell was still running (and has no
 * ETA). */
export function formatStatus(status, elapsed, saved = false) {
  if (!status) return "";
  const running = saved ? "◌ saved while running" : "● running";
  const state = { running, done: "✓ finished", failed: "✗ stopped" }[status.state] ?? status.state;
  const bits = [state, `${status.ranks} rank${status.ranks === 1 ? "" : "s"}`];
  if (status.desc) bits.push(status.desc);
  if (status.step !== null && status.step !== undefined)
    bits.push(`step ${formatTick(status.step)}${status.total ? `/${status.total.toLocaleString("en-US")}` : ""}`);
  else if (status.epoch !== null && status.epoch !== undefined) bits.push(`epoch ${formatNumber(status.epoch)}`);
  // Where no step was printed, the optimizer steps counted: the number the sidebar shows, in its unit.
  if ((status.step === null || status.step === undefined) && status.steps) bits.push(`${formatTick(status.steps)} steps`);
  if (status.samples_per_s) bits.push(`${Math.round(status.samples_per_s).toLocaleString("en-US")} samples/s`);
  else if (status.steps_per_s) bits.push(`${formatRate(status.steps_per_s)} steps/s`);
  bits.push(`${formatDuration(elapsed)} elapsed`);
  if (status.state === "running" && !saved && status.eta !== null && status.eta !== undefined)
    bits.push(`ETA ${formatDuration(status.eta)}`);
  if (status.warning) bits.push(`⚠ ${status.warning}`);
  if (status.straggler) bits.push(status.straggler);
  return bits.join(" · ");
}
