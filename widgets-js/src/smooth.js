// The smoothed curve drawn over each metric: TensorBoard's debiased exponential moving average.
// jupyter_hvd/widgets/static_plot.py smooth() computes the same for the static copy saved with the notebook;
// tests/test_smoothing.py runs both on the same series and fails when they differ.

export const SMOOTHING = 0.8;

/** The smoothed value of each point; NaN and infinities stay as they are (a gap) and do not move the average. */
export function smooth(ys, weight = SMOOTHING) {
  const smoother = new Smoother(weight);
  return Array.from(ys, (y) => smoother.push(y));
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
