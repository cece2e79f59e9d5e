// The smoothed curve drawn under each metric: TensorBoard's debiased exponential moving average, off for a curve
// of fewer than SMOOTH_FROM points (an average of a few points only lags), and the weight the view's slider sets.
// jupyter_hvd/widgets/static_plot.py smooth() and smoothing_for() compute the same for the finished view's images;
// tests/test_smoothing.py runs both on the same series and fails when they differ.

export const SMOOTHING = 0.6; // TensorBoard's default weight
export const SMOOTH_FROM = 20;

/** The smoothed value of each point; NaN and infinities stay as they are (a gap) and do not move the average. */
export function smooth(ys, weight = SMOOTHING) {
  const smoother = new Smoother(weight);
  return Array.from(ys, (y) => smoother.push(y));
}

/** The weight a curve of `points` points is smoothed with: the user's choice, else SMOOTHING from SMOOTH_FROM on. */
export function smoothingFor(points, chosen = null) {
  if (chosen !== null && chosen !== undefined) return Math.min(Math.max(Number(chosen), 0), 0.999);
  return points >= SMOOTH_FROM ? SMOOTHING : 0;
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
