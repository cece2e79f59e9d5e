// Everything one view has received: the log, the curves, the status. The live widget fills it from the kernel's
// incremental messages; the finished view (saved in the notebook) fills it from its saved data at once.
import { LogModel } from "./log.js";
import { SeriesStore } from "./series.js";

function float64(buffer) {
  // Front ends hand buffers over as ArrayBuffers or as views whose offset may not be 8-aligned: copy.
  if (buffer instanceof ArrayBuffer) return new Float64Array(buffer.slice(0));
  return new Float64Array(buffer.buffer.slice(buffer.byteOffset, buffer.byteOffset + buffer.byteLength));
}

export class Store {
  constructor(logLines) {
    this.log = new LogModel(logLines);
    this.series = new SeriesStore();
    this.status = null;
    this.statusAt = 0;
    this.seq = 0;
    this.saved = false; // a copy saved in the notebook: its time stands still, even where the cell was running
    this.listeners = new Set();
  }

  /** A store holding a finished view's saved data (jupyter_hvd/widgets/static_plot.py view_data). */
  static fromSaved(data) {
    const lines = data.log?.append ?? [];
    const store = new Store(Math.max(1, lines.length));
    for (const c of data.curves ?? []) {
      const ys = Float64Array.from(c.y, (v) => (v === null ? NaN : v)); // a gap was saved as null
      store.series.apply(`${c.name}@${c.rank}`, 0, true, Float64Array.from(c.x), ys, {
        name: c.name,
        rank: c.rank,
        xKind: c.x_kind,
      });
    }
    store.log.apply({ append: lines, partials: [], total: data.log?.total ?? lines.length }, true);
    store.status = data.status ?? null;
    store.statusAt = Date.now();
    store.saved = true;
    return store;
  }

  /** Apply one update message; returns false when something was missed (the caller asks for a full copy). */
  handle(msg, buffers) {
    if (msg.type !== "update") return true;
    let ok = msg.full || msg.seq === this.seq + 1;
    this.seq = msg.seq;
    msg.curves.forEach((c, i) => {
      const meta = { name: c.name, rank: c.rank, xKind: c.x_kind };
      const key = c.key ?? `${c.name}@${c.rank ?? 0}`;
      ok = this.series.apply(key, c.start, c.reset, float64(buffers[2 * i]), float64(buffers[2 * i + 1]), meta) && ok;
    });
    const logChange = msg.log ? this.log.apply(msg.log, msg.full) : null;
    this.status = msg.status;
    this.statusAt = Date.now();
    for (const listener of this.listeners) listener(logChange);
    return ok;
  }

  elapsed() {
    if (!this.status) return 0;
    const extra = this.status.state === "running" && !this.saved ? (Date.now() - this.statusAt) / 1000 : 0;
    return this.status.elapsed + extra;
  }
}
