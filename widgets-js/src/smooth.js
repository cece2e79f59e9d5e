// The smoothed curve drawn under each metric: TensorBoard's debiased exponential moving average, off for a curve
// of fewer than SMOOTH_FROM points (an average of a few points only lags), off for schedules and bounded metrics
// unless the user asks, and the weight the view's slider sets.
// jupyter_hvd/widgets/static_plot.py smooth(), smoothing_for() and smoothed_by_default() compute the same for the
// finished view's images; tests/test_smoothing.py runs both on the same series and names and fails when they differ.

export const SMOOTHING = 0.6; // TensorBoard's default weight
export const SMOOTH_FROM = 20;
// Words of a metric's name that make it a schedule (set, not measured: its trend is itself) or a bounded metric (an
// accuracy moves in steps between 0 and 1; a moving average blurs the step that matters): drawn as they are.
export const AS_IS = new Set([
  "lr", "learning", "momentum", "wd", "decay", "warmup", "temperature", "beta", "beta1", "beta2", "eps", "epsilon",
  "scale", "acc", "accuracy", "acc1", "acc5", "top1", "top5", "precision", "prec", "prec1", "prec5", "recall", "f1",
  "auc", "auroc", "iou", "miou", "dice", "map",
]);

/** Whether the curve of metric `name` gets the automatic smoothing: not a schedule (`lr`), not bounded (`acc`). */
export function smoothedByDefault(name) {
  return !String(name ?? "")
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .some((word) => AS_IS.has(word));
}

/** The smoothed value of each point; NaN and infinities stay as they are (a gap) and do not move the average. */
export function smooth(ys, weight = SMOOTHING) {
  const smoother = new Smoother(weight);
  return Array.from(ys, (y) => smoother.push(y));
}

/** The weight a curve of `points` points of metric `name` is smoothed with: the user's choice, else SMOOTHING from
 * SMOOTH_FROM points on for a metric smoothed by default. */
export function smoothingFor(points, chosen = null, name = "") {
  if (chosen !== null && chosen !== undefined) return Math.min(Math.max(Number(chosen), 0), 0.999);
  return points >= SMOOTH_FROM && smoothedByDefault(name) ? SMOOTHING : 0;
}

/** The same average fed one point at a time, for curves that grow while a cell runs. */
export class Smoother {
  constructor(weight = SMOOTHING) {
    this.weight = weight;
    this.ema = 0;
    this.count = 0; // finite points seen: the debiasing divides by 1 - weight ** count
  }

  push(y) {
    if (!Number.isFinite(y)) return y;
    const w = this.weight;
    this.count += 1;
    this.ema = this.ema * w + (1 - w) * y;
    return this.ema / (1 - w ** this.count);
  }
}
