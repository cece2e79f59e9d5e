// The points of each curve (a metric of a rank) as they arrive, their smoothed values, and which panel shows them.
import { Smoother } from "./smooth.js";

// A metric's family: `val_loss` and `test_loss` are drawn with `loss` (jupyter_hvd/widgets/curves.py SPLITS).
export const SPLITS = ["train", "training", "val", "valid", "validation", "test", "eval"];

/** Whether metric `name` belongs in the plot for `pattern` (`loss` matches `val_loss`), as in curves.py. */
export function plotMatches(pattern, name) {
  const p = pattern.trim().toLowerCase();
  return name === p || name.split("_").some((w) => w.startsWith(p));
}

/** The panel a metric is drawn in when every metric is plotted, as curves.py family(). */
export function family(name) {
  const i = name.indexOf("_");
  if (i < 0) return name;
  const head = name.slice(0, i);
  const rest = name.slice(i + 1);
  return rest && SPLITS.includes(head) ? rest : name;
}

/** [title, metric names] per panel, in the order metrics first came, as curves.py panels(). */
export function panels(names, patterns) {
  if (patterns.length === 1 && patterns[0] === "all") {
    const order = new Map();
    for (const name of names) {
      const f = family(name);
      if (!order.has(f)) order.set(f, []);
      order.get(f).push(name);
    }
    return [...order.entries()];
  }
  return patterns.map((p) => [p, names.filter((n) => plotMatches(p, n))]);
}

function grow(arr, need) {
  if (need <= arr.length) return arr;
  const next = new Float64Array(Math.max(need, arr.length * 2, 64));
  next.set(arr);
  return next;
}

/** Points per curve in growable float64 arrays: x and y (NaN/Inf kept, a gap when drawn), and the smoothed y. */
export class SeriesStore {
  constructor() {
    this.series = new Map(); // key ("loss@0") -> { key, name, rank, xKind, n, x, y, ... }
  }

  /** Append points that start at index `start`; returns false when points are missing (a gap). */
  apply(key, start, reset, xs, ys, meta = {}) {
    let s = this.series.get(key);
    if (!s || reset) {
      s = {
        key,
        name: meta.name ?? key.split("@")[0],
        rank: meta.rank ?? 0,
        xKind: meta.xKind ?? "step",
        n: 0,
        x: new Float64Array(64),
        y: new Float64Array(64),
        sm: new Float64Array(64),
        smN: 0,
        smWeight: null,
        smoother: null,
      };
      this.series.set(key, s);
    }
    if (start > s.n) return false;
    const skip = s.n - start; // points already here (a repeated message)
    const add = xs.length - skip;
    if (add <= 0) return true;
    s.x = grow(s.x, s.n + add);
    s.y = grow(s.y, s.n + add);
    for (let i = skip; i < xs.length; i++) {
      s.x[s.n] = xs[i];
      s.y[s.n] = ys[i];
      s.n += 1;
    }
    return true;
  }

  /** The smoothed values of series `s` with `weight` (0: none), kept up to date as points arrive. */
  smoothed(s, weight) {
    if (s.smWeight !== weight) {
      s.smWeight = weight;
      s.smN = 0;
      s.smoother = new Smoother(weight);
    }
    s.sm = grow(s.sm, s.n);
    for (; s.smN < s.n; s.smN++) s.sm[s.smN] = weight > 0 ? s.smoother.push(s.y[s.smN]) : NaN;
    return s.sm;
  }

  /** Metric names in the order they first came. */
  names() {
    return [...new Set([...this.series.values()].map((s) => s.name))];
  }

  /** The curves of metrics `names`, every rank's, metric by metric. */
  ofNames(names) {
    const all = [...this.series.values()];
    return names.flatMap((n) => all.filter((s) => s.name === n).sort((a, b) => a.rank - b.rank));
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
