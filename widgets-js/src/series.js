// The points of each metric as they arrive from the kernel, with their smoothed curve kept up to date.
import { SMOOTHING, Smoother } from "./smooth.js";

/** Whether metric `name` belongs in the plot for `pattern` (`loss` matches `val_loss`), as in curves.py. */
export function plotMatches(pattern, name) {
  const p = pattern.trim().toLowerCase();
  return name === p || name.split("_").some((w) => w.startsWith(p));
}

function grow(arr, need) {
  if (need <= arr.length) return arr;
  const next = new Float64Array(Math.max(need, arr.length * 2, 64));
  next.set(arr);
  return next;
}

/** Points per metric in growable float64 arrays: x, y and the smoothed y (NaN/Inf kept, a gap when drawn). */
export class SeriesStore {
  constructor(smoothing = SMOOTHING) {
    this.smoothing = smoothing;
    this.series = new Map();
  }

  /** Append points that start at index `start`; returns false when points are missing (a gap). */
  apply(name, start, reset, xs, ys) {
    let s = this.series.get(name);
    if (!s || reset) {
      s = { name, n: 0, x: new Float64Array(64), y: new Float64Array(64), sm: new Float64Array(64) };
      s.smoother = new Smoother(this.smoothing);
      this.series.set(name, s);
    }
    if (start > s.n) return false;
    const skip = s.n - start; // points already here (a repeated message)
    const add = xs.length - skip;
    if (add <= 0) return true;
    s.x = grow(s.x, s.n + add);
    s.y = grow(s.y, s.n + add);
    s.sm = grow(s.sm, s.n + add);
    for (let i = skip; i < xs.length; i++) {
      s.x[s.n] = xs[i];
      s.y[s.n] = ys[i];
      s.sm[s.n] = s.smoother.push(ys[i]);
      s.n += 1;
    }
    return true;
  }

  matching(pattern) {
    return [...this.series.values()].filter((s) => plotMatches(pattern, s.name));
  }
}

/** Index of the point whose x is nearest to `x` among the first `n` (x increasing). */
export function nearestIndex(xs, n, x) {
  if (n === 0) return -1;
  let lo = 0;
  let hi = n - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (xs[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  if (lo > 0 && Math.abs(xs[lo - 1] - x) <= Math.abs(xs[lo] - x)) return lo - 1;
  return lo;
}
