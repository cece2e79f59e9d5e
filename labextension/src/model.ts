/**
 * What the sidebar shows, in the user's words: pools and their ranks as the server reports them, and the
 * small decisions about them (how to print a figure, which action needs a confirmation). No JupyterLab
 * imports here, so it is unit-tested on its own.
 */

export type PoolState =
  | 'starting'
  | 'idle'
  | 'running'
  | 'restarting'
  | 'failed'
  | 'stopping'
  | 'stale';

export type RankState = 'idle' | 'busy' | 'stalled' | 'debugger' | 'dead';

export type Action = 'interrupt' | 'restart' | 'stop' | 'where';

export const ACTIONS: Action[] = ['where', 'interrupt', 'restart', 'stop'];

/**
 * One rank as the server sends it: the pool file's rank fields (jupyter_hvd/state/schema.py, RankRecord) plus
 * heartbeat_age. tests/test_state_schema.py fails when these names and the Python side differ.
 */
export interface IRank {
  rank: number;
  engine_id?: number | null;
  host: string;
  pid: number;
  device: string;
  controller?: string | null;
  tensor_ops?: string | null;
  local_rank?: number | null;
  cross_rank?: number | null;
  state: RankState;
  step?: number | null;
  loss?: number | null;
  last_line?: string | null;
  cpu_percent?: number | null;
  rss_mb?: number | null;
  gpu_mem_mb?: number | null;
  gpu_mem_total_mb?: number | null;
  gpu_util?: number | null;
  heartbeat?: number | null;
  /** The tensor names a stalled rank waits in, comma-separated. */
  stalled_on?: string | null;
  /** Milliseconds per step spent computing and waiting in collectives (recent means). */
  compute_ms?: number | null;
  wait_ms?: number | null;
  heartbeat_age?: number | null;
}

/** A rank that has been much slower than the others for a while. */
export interface IStraggler {
  rank: number;
  ratio: number;
  message: string;
}

/** The first NaN or Inf metric of the running or last cell. */
export interface INonfinite {
  rank: number;
  step: number | null;
  metric: string;
  message: string;
}

/** Where every rank was when last asked (POST .../pools/<id>/where or where-full asks the kernel for one). */
export interface IWhereReport {
  /** Epoch seconds. */
  asked: number;
  /** What asked, in words: "the sidebar asked", "you interrupted", "Horovod reported a stall", "%hvd_where asked". */
  why: string;
  /** With library frames. */
  full: boolean;
  /** Identical places grouped, one line each ("ranks 0-2: waiting in allreduce 'grad' (cell line 6)"). */
  text: string;
  /** Each rank's place, by rank. */
  places: string[];
}

/** One pool as the server sends it (jupyter_hvd/server/registry.py describe()). */
export interface IPool {
  id: string;
  state: PoolState;
  stale: boolean;
  stale_for?: number | null;
  notebook: string;
  kernel_id: string;
  kernel_pid?: number | null;
  np: number;
  backend: string;
  hosts: string[];
  started?: number;
  /** When the running engines started (epoch s): a restart starts new ones. */
  engines_started?: number;
  /** When the running (or last) %%hvd cell started (epoch s); 0 before the first. */
  cell_started?: number;
  /** Seconds since the running engines started. */
  uptime: number;
  updated_age: number;
  cell?: string | null;
  /** The running "cell" is jupyter-hvd's own work on the ranks (a restore): `cell` says it in words. */
  cell_own?: boolean;
  ranks: IRank[];
  straggler?: IStraggler | null;
  nonfinite?: INonfinite | null;
  /** Where the ranks were when last asked (the Where action, the stop button, a stall, %hvd_where). */
  where?: IWhereReport | null;
  /** jupyter-hvd's own threads that failed. */
  problems?: string[];
  /** The names %hvd_keep keeps, their snapshots on disk, and the disk those take. */
  kept?: string[];
  snapshots?: number;
  kept_bytes?: number;
  /** Entries of the setup journal (%%hvd --setup cells, %hvd_push): a restart replays them. */
  journal_entries?: number;
}

export interface IPoolList {
  pools: IPool[];
  now: number;
}

/** "42 s", "3 min", "2 h 5 min": an age or uptime at a glance. */
export function formatDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) {
    return '–';
  }
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) {
    return `${s} s`;
  }
  if (s < 3600) {
    return `${Math.floor(s / 60)} min`;
  }
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return m ? `${h} h ${m} min` : `${h} h`;
}

/** "Kept: model, opt · 3 snapshots · 286 MB on disk", or '' where nothing is kept. Non-breaking spaces keep
 * "3 snapshots" and "286 MB on disk" on one line each in the narrow sidebar. */
export function formatKept(p: IPool): string {
  if (!p.kept || !p.kept.length) {
    return '';
  }
  const together = (text: string) => text.replace(/ /g, '\u00a0');
  const size = `${formatBytes(p.kept_bytes || 0)} on disk`;
  return `Kept: ${p.kept.join(', ')} · ${together(plural(p.snapshots || 0, 'snapshot'))} · ${together(size)}`;
}

/** "1 snapshot", "3 snapshots". */
function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

/** Bytes on disk as "286 MB" or "3.2 GB"; "< 1 MB" for a few bytes (not "0 MB", which reads as nothing). */
export function formatBytes(bytes: number): string {
  return bytes > 0 && bytes < 2 ** 20 ? '< 1 MB' : formatMegabytes(bytes / 2 ** 20);
}

/** Megabytes as "812 MB" or "3.2 GB". */
export function formatMegabytes(mb: number | null | undefined): string {
  if (mb === null || mb === undefined) {
    return '–';
  }
  return mb >= 1024 ? `${(mb / 1024).toFixed(1)} GB` : `${Math.round(mb)} MB`;
}

/** A rank's memory: GPU used/total and utilisation where NVML reported it, CPU % and RSS otherwise. */
export function formatMemory(r: IRank): string {
  if (r.gpu_mem_mb !== null && r.gpu_mem_mb !== undefined) {
    const total = r.gpu_mem_total_mb ? `/${formatMegabytes(r.gpu_mem_total_mb)}` : '';
    const util = r.gpu_util !== null && r.gpu_util !== undefined ? ` ${Math.round(r.gpu_util)}%` : '';
    return `GPU ${formatMegabytes(r.gpu_mem_mb)}${total}${util}`;
  }
  if (r.cpu_percent === null || r.cpu_percent === undefined) {
    return r.rss_mb ? formatMegabytes(r.rss_mb) : '–';
  }
  return `CPU ${Math.round(r.cpu_percent)}% ${formatMegabytes(r.rss_mb)}`;
}

/** A loss with 4 significant digits, a step as an integer; '–' when the cell reports none. */
export function formatLoss(loss: number | null | undefined): string {
  return loss === null || loss === undefined ? '–' : Number(loss).toPrecision(4);
}

/** A step count in at most 5 characters: 1200, 12345 → "12.3k", 2500000 → "2.5M". */
export function formatStep(step: number | null | undefined): string {
  if (step === null || step === undefined) {
    return '–';
  }
  if (step < 100000) {
    return String(step);
  }
  return step < 1e6 ? `${Math.round(step / 1000)}k` : `${(step / 1e6).toPrecision(2)}M`;
}

/** A loss in a narrow column (at most 6 characters): "0.123", "0.0083", "12.3", "1.2e-5", "3.4e+6". */
export function formatLossShort(loss: number | null | undefined): string {
  if (loss === null || loss === undefined) {
    return '–';
  }
  const v = Number(loss);
  const tiny = v !== 0 && Math.abs(v) < 0.001;
  if (tiny || Math.abs(v) >= 1e5) {
    return v.toExponential(1);
  }
  return v.toPrecision(v !== 0 && Math.abs(v) < 0.01 ? 2 : 3);
}

function ms(v: number): string {
  return v >= 10 ? String(Math.round(v)) : v.toFixed(1).replace(/\.0$/, '');
}

/** Compute/wait milliseconds per step, "12/3"; '–' until the rank has timed steps. */
export function formatPace(r: IRank): string {
  const known = (v: number | null | undefined): v is number => v !== null && v !== undefined && isFinite(v);
  if (!known(r.compute_ms) && !known(r.wait_ms)) {
    return '–';
  }
  return `${known(r.compute_ms) ? ms(r.compute_ms) : '?'}/${known(r.wait_ms) ? ms(r.wait_ms) : '?'}`;
}

/** Milliseconds per step in a narrow column: "25", "3.2", '–' when not measured. */
export function formatMs(v: number | null | undefined): string {
  return v === null || v === undefined || !isFinite(v) ? '–' : ms(v);
}

/** What formatPace's two numbers mean, for its tooltip. */
export function paceTitle(r: IRank): string {
  if ((r.compute_ms ?? null) === null && (r.wait_ms ?? null) === null) {
    return 'compute/wait ms per step: not measured yet (the rank has not timed a training step)';
  }
  const f = (v: number | null | undefined) => (v === null || v === undefined ? '?' : `${v.toFixed(1)} ms`);
  return `per step (recent mean): ${f(r.compute_ms)} computing, ${f(r.wait_ms)} waiting for the other ranks in collectives`;
}

/** A rank's load in about 8 characters: GPU or CPU utilisation and memory, "87% 2.0G", "97% 30G", "98% 900M". */
export function formatUsage(r: IRank): string {
  const short = (mb: number | null | undefined) => {
    if (mb === null || mb === undefined) {
      return '';
    }
    return mb < 1024 ? `${Math.round(mb)}M` : mb < 10240 ? `${(mb / 1024).toFixed(1)}G` : `${Math.round(mb / 1024)}G`;
  };
  const gpu = r.gpu_mem_mb !== null && r.gpu_mem_mb !== undefined;
  const util = gpu ? r.gpu_util : r.cpu_percent;
  const pct = util === null || util === undefined ? '' : `${Math.round(util)}%`;
  return [pct, short(gpu ? r.gpu_mem_mb : r.rss_mb)].filter(Boolean).join(' ') || '–';
}

/** Rank numbers as ranges: [1, 2, 3, 5] → "ranks 1-3, 5"; [4] → "rank 4". */
export function formatRanks(ranks: number[]): string {
  const sorted = [...ranks].sort((a, b) => a - b);
  const parts: string[] = [];
  for (let i = 0; i < sorted.length; i++) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j] + 1) {
      j++;
    }
    parts.push(j > i ? `${sorted[i]}-${sorted[j]}` : String(sorted[i]));
    i = j;
  }
  return `${sorted.length === 1 ? 'rank' : 'ranks'} ${parts.join(', ')}`;
}

export type WarningKind = 'nonfinite' | 'straggler' | 'stalled' | 'problem';

export interface IWarning {
  kind: WarningKind;
  text: string;
}

/**
 * What needs the user's eye in a pool, one line each: a NaN/Inf metric, a straggler, ranks stalled in a
 * collective (grouped by the tensors they wait in), and jupyter-hvd's own threads that failed.
 */
export function poolWarnings(p: IPool): IWarning[] {
  const out: IWarning[] = [];
  if (p.nonfinite) {
    out.push({ kind: 'nonfinite', text: p.nonfinite.message });
  }
  if (p.straggler) {
    out.push({ kind: 'straggler', text: p.straggler.message });
  }
  const waits = new Map<string, number[]>();
  for (const r of p.ranks) {
    if (r.state === 'stalled' && r.stalled_on) {
      waits.set(r.stalled_on, [...(waits.get(r.stalled_on) ?? []), r.rank]);
    }
  }
  waits.forEach((ranks, tensors) =>
    out.push({ kind: 'stalled', text: `${formatRanks(ranks)} ${ranks.length === 1 ? 'waits' : 'wait'} in ${tensors}` })
  );
  for (const problem of p.problems ?? []) {
    out.push({ kind: 'problem', text: problem });
  }
  return out;
}

/** A `%%hvd` cell this page saw its pool's kernel begin (the kernel's execute_input), which the pool file says only
 * within a second or so: the kernel writes the file from its watcher thread, and the sidebar asks once a second. */
export interface ICellSeen {
  /** When the page saw it begin, in the server's clock (epoch s). */
  at: number;
  /** Its first line, as the pool file will show it. */
  firstLine: string;
  /** The request that ran it (the execute_input's parent), to know its end by. */
  request?: string;
  /** When the page saw it end (its kernel went idle after it), server clock; a short cell ends before the pool file
   * said it began. */
  ended?: number;
}

/** The first line of a `%%hvd` cell's body as the kernel shows it (its first non-blank line, 120 characters), or
 * null for code that is not a `%%hvd` cell (a line magic, plain Python). */
export function hvdCellFirstLine(code: string): string | null {
  const lines = code.replace(/^\s*\n/, '').split('\n');
  if (!/^\s*%%hvd(\s|$)/.test(lines[0] ?? '')) {
    return null;
  }
  return (lines.slice(1).find(line => line.trim()) ?? '').slice(0, 120);
}

/** How long after a cell began a pool file must have been written to be that cell's: the kernel clears the figures
 * within milliseconds of the cell's start, and the page's and the kernel's times of it differ by the network's
 * delay. */
export const CELL_FILE_DELAY_S = 0.3;

/** The figures of a rank that belong to one cell (kernel/launch/pool_file.py CELL_FIGURES, and what a stall adds). */
const CELL_FIGURES = ['step', 'loss', 'compute_ms', 'wait_ms', 'last_line', 'stalled_on'] as const;

/**
 * Pool `p` as of the `%%hvd` cell this page saw begin (`seen`), where the pool file (answered by the server at
 * `now`, epoch s) was written before that cell began: the new cell runs (or, seen ended, the pool is idle), and the
 * previous cell's figures, warnings and Where are not shown as its own. Otherwise `p` as the file says.
 */
export function asOfCell(p: IPool, seen: ICellSeen | undefined, now: number): IPool {
  if (!seen || p.stale || (p.state !== 'idle' && p.state !== 'running')) {
    return p;
  }
  const written = now - (p.updated_age ?? 0);
  if (written >= seen.at + CELL_FILE_DELAY_S || (p.cell_started ?? 0) >= seen.at) {
    return p; // the file knows this cell (or a later one)
  }
  const ended = seen.ended !== undefined;
  const ranks = p.ranks.map(r => {
    const fresh: IRank = { ...r, state: r.state === 'dead' ? r.state : ended ? 'idle' : 'busy' };
    for (const name of CELL_FIGURES) {
      fresh[name] = null;
    }
    return fresh;
  });
  const cell = ended
    ? { state: 'idle' as const, cell: null, cell_started: seen.at }
    : { state: 'running' as const, cell: seen.firstLine, cell_started: seen.at };
  return { ...p, ...cell, ranks, straggler: null, nonfinite: null };
}

/** Whether the pool's Where picture is about what runs now: taken since the running (or last) cell began and since
 * the running engines started. An older one (a cell or a restart ago) is not shown. */
export function whereIsCurrent(p: IPool): boolean {
  if (!p.where) {
    return false;
  }
  const since = Math.max(p.engines_started ?? p.started ?? 0, p.cell_started ?? 0);
  return p.where.asked >= since;
}

/** An action asked for from the sidebar that has not finished: the pool's buttons wait for it. */
export interface IPending {
  action: Action;
  /** The pool it was asked for on. */
  poolId: string;
  /** When it was asked for (ms since the epoch). */
  since: number;
  /** The pool's engines (pids) and when its `where` was taken, as it was asked for: a restart makes new engines,
   * Where a new answer. */
  pids: number[];
  whereAsked: number;
  /** A Restart at another number of ranks: that number. Such a restart starts a new pool (a new id) in the place of
   * the old one, which the sidebar knows by its kernel. */
  np?: number;
  kernelId?: string;
  /** The pool's newest problem as it was asked for: a restart the kernel refused (a size the host cannot run) leaves
   * the same engines running and says why as a new problem. */
  problem?: string;
}

const PENDING_LIMIT_S: Record<Action, number> = { where: 10, interrupt: 20, restart: 180, stop: 60 };

/** What the sidebar remembers when `action` is asked for on pool `p` (a Restart at `np` ranks where given). */
export function pending(p: IPool, action: Action, now = Date.now(), np?: number): IPending {
  const job: IPending = {
    action,
    poolId: p.id,
    since: now,
    pids: p.ranks.map(r => r.pid),
    whereAsked: p.where?.asked ?? 0
  };
  if (action === 'restart') {
    job.problem = p.problems?.[0] ?? '';
    if (np !== undefined && np !== p.np) {
      job.np = np;
      job.kernelId = p.kernel_id;
    }
  }
  return job;
}

/** The pool that action `job` is about now: the pool it was asked for on, or, for a Restart at another size, the new
 * pool its kernel started in that one's place; null while there is none (the old one stopped, the new one not yet
 * written). */
export function pendingPool(job: IPending, pools: IPool[]): IPool | null {
  const same = pools.find(p => p.id === job.poolId);
  if (same || job.np === undefined) {
    return same ?? null;
  }
  return pools.find(p => p.kernel_id === job.kernelId && !p.stale) ?? null;
}

/** Whether the action asked for has finished, as the pool (or its absence: `p` null) shows it, or taken too long. A
 * Restart at another size is not done when its pool is gone: a new pool takes its place (pendingPool). */
export function pendingDone(job: IPending, p: IPool | null, now = Date.now()): boolean {
  if ((now - job.since) / 1000 > PENDING_LIMIT_S[job.action]) {
    return true;
  }
  if (!p || p.stale) {
    return !!p || job.np === undefined;
  }
  switch (job.action) {
    case 'interrupt':
      return p.state !== 'running';
    case 'restart': {
      // Done when the new engines are idle: until the setup journal is replayed and the kept names restored the
      // kernel shows the pool restarting (running while it runs those cells). Refused (the old engines run on): the
      // kernel notes why as the pool's newest problem.
      const pids = p.ranks.map(r => r.pid);
      const fresh = pids.length > 0 && !pids.some(pid => job.pids.includes(pid));
      const problem = p.problems?.[0] ?? '';
      const refused = job.problem !== undefined && p.id === job.poolId && !fresh && problem !== job.problem;
      return (fresh && p.state === 'idle') || p.state === 'failed' || refused;
    }
    case 'stop':
      return p.state === 'failed';
    case 'where':
      return (p.where?.asked ?? 0) !== job.whereAsked;
  }
}

/** "Restarting the pool at 3 ranks (asked 4 s ago)…": what the pool's buttons wait for. */
export function pendingText(job: IPending, now = Date.now()): string {
  const doing: Record<Action, string> = {
    where: 'Asking the ranks where they are',
    interrupt: 'Interrupting the running cell',
    restart: job.np ? `Restarting the pool at ${plural(job.np, 'rank')}` : 'Restarting the pool',
    stop: 'Stopping the pool'
  };
  return `${doing[job.action]} (asked ${formatDuration((now - job.since) / 1000)} ago)…`;
}

/** The notebook a pool belongs to, by its file name; the kernel id when the server does not know it. */
export function poolTitle(p: IPool): string {
  if (p.notebook) {
    const parts = p.notebook.split('/');
    return parts[parts.length - 1];
  }
  return p.kernel_id ? `kernel ${p.kernel_id.slice(0, 8)}` : p.id;
}

/** Which actions a pool can take now: a stale pool (its kernel died) can only be cleaned up. */
export function allowedActions(p: IPool): Action[] {
  if (p.stale) {
    return ['stop'];
  }
  if (p.state === 'stopping' || p.state === 'restarting') {
    return []; // an action runs: nothing else until it is done
  }
  if (p.state === 'idle' || p.state === 'starting' || p.state === 'failed') {
    return ['where', 'restart', 'stop'];
  }
  return ACTIONS;
}

/** The most ranks the server takes for a Restart at another size (jupyter_hvd/state/actions.py MAX_RANKS). */
export const MAX_RANKS = 4096;

/** The Restart dialog's size field: a number of ranks, prefilled with the pool's. */
export interface ISizeField {
  label: string;
  value: number;
  min: number;
  max: number;
  /** What the field does, beside it. */
  hint: string;
}

/** What a destructive action asks before it runs: the dialog's title, its paragraphs, the button that goes on, and
 * for Restart the number of ranks to restart at. */
export interface IConfirmation {
  title: string;
  lines: string[];
  accept: string;
  size?: ISizeField;
}

/** Why the size field's `text` is not a number of ranks to restart at, in a few words; '' when it is one. */
export function sizeProblem(text: string): string {
  const t = text.trim();
  if (!t) {
    return 'Say how many ranks: a whole number, 1 or more.';
  }
  const n = Number(t);
  if (!Number.isFinite(n) || !Number.isInteger(n)) {
    return 'A number of ranks is a whole number (1, 2, 3, ...).';
  }
  if (n < 1) {
    return 'At least 1 rank.';
  }
  if (n > MAX_RANKS) {
    return `At most ${MAX_RANKS} ranks.`;
  }
  return '';
}

/** The size field's `text` as a number of ranks, or null where sizeProblem says why not. */
export function parseSize(text: string): number | null {
  return sizeProblem(text) ? null : Number(text.trim());
}

/** The body of POST .../pools/<id>/restart: {"np": N} only for another size than the pool's; none for a plain
 * restart (the same options). */
export function restartBody(p: IPool, np: number | null | undefined): string | undefined {
  return np === null || np === undefined || np === p.np ? undefined : JSON.stringify({ np });
}

/** "the setup journal's 2 entries", or, from a server that does not say how many, the journal by its contents. */
function journalWords(p: IPool): string {
  const n = p.journal_entries;
  if (n === undefined || n === null) {
    return 'the setup journal (%%hvd --setup cells, %hvd_push), if any';
  }
  return n === 1 ? "the setup journal's entry" : `the setup journal's ${n} entries`;
}

/** What a restart of `p` brings back, in words: the setup journal replayed, then the kept names restored from their
 * newest snapshot (kernel/keep/service.py bring_back); at another size (`np`), the setup cells run at that size and
 * the kept models and optimizers come to every new rank. '' where nothing comes back. */
export function comesBack(p: IPool, np?: number): string {
  const parts: string[] = [];
  if (p.journal_entries !== 0) {
    const order = p.journal_entries === 1 ? '' : ' in order';
    const at = np === undefined ? '' : ` at ${plural(np, 'rank')} (hvd.size() is ${np} in it)`;
    parts.push(`${journalWords(p)}, replayed${order}${at}`);
  }
  const kept = p.kept ?? [];
  if (kept.length && (p.snapshots ?? 0) > 0) {
    const every = np === undefined ? '' : ", on every new rank from rank 0's copy";
    parts.push(`${kept.join(', ')} from ${kept.length === 1 ? 'its' : 'their'} newest snapshot${every}`);
  }
  return parts.join('; then ');
}

/**
 * The question to ask before an action, or null when it asks nothing. Where and Interrupt change nothing on the
 * ranks but the running cell, so they never ask; Restart and Stop destroy what the ranks hold, and say what comes
 * back and what does not. A pool with nothing left to lose (its kernel died, its restart failed) is not asked about.
 * Restart asks at how many ranks (`np`, the pool's own by default) and says what another size does.
 */
export function confirmation(p: IPool, action: Action, np: number = p.np): IConfirmation | null {
  if (action === 'where' || action === 'interrupt' || p.stale || p.state === 'failed') {
    return null;
  }
  const title = `${action === 'restart' ? 'Restart' : 'Stop'} the pool of ${poolTitle(p)}?`;
  const first = p.state === 'running' ? ' The running cell is interrupted first.' : '';
  if (action === 'restart') {
    const size: ISizeField = {
      label: 'Ranks',
      value: p.np,
      min: 1,
      max: MAX_RANKS,
      hint: `now ${p.np}; another number restarts the pool at that size`
    };
    return { title, lines: restartLines(p, np, first), accept: 'Restart', size };
  }
  const lost = ["everything in the ranks' namespaces"];
  if (p.journal_entries) {
    lost.push(journalWords(p));
  }
  if (p.kept?.length) {
    const n = p.snapshots ?? 0;
    const snapshots = n === 1 ? 'the snapshot' : `the ${n} snapshots`;
    const size = formatBytes(p.kept_bytes ?? 0);
    lost.push(
      n
        ? `${snapshots} of ${p.kept.join(', ')} (${size}): a stopped pool's directory is removed`
        : `what is kept of ${p.kept.join(', ')}`
    );
  }
  const listed = lost.length > 1 ? `${lost.slice(0, -1).join(', ')} and ${lost[lost.length - 1]}` : lost[0];
  return {
    title,
    lines: [
      `Its ${p.np} ranks end, and the pool with them.${first}`,
      `Lost: ${listed}.`,
      `%hvd_start -np ${p.np} starts a new, empty pool.`
    ],
    accept: 'Stop'
  };
}

/** What a Restart of `p` at `np` ranks does, one paragraph each; `first`: what happens before it (the running cell). */
function restartLines(p: IPool, np: number, first: string): string[] {
  const resize = np !== p.np;
  const back = comesBack(p, resize ? np : undefined);
  const lines = [
    resize
      ? `Its ${plural(p.np, 'rank')} end and ${np} new ${np === 1 ? 'rank starts' : 'ranks start'} in their place, ` +
        `with the same options otherwise.${first}`
      : `Its ${p.np} ranks start again as new processes, with the same options.${first}`
  ];
  lines.push(
    back ? `Comes back: ${back}.` : 'Nothing comes back: no %%hvd --setup cell has run and no name is kept (%hvd_keep).'
  );
  if (p.kept?.length && !p.snapshots) {
    lines.push(
      `${p.kept.join(', ')}: kept, but no snapshot is written yet (one is at the end of the next %%hvd cell that ` +
        'succeeds), so it does not come back.'
    );
  }
  if (resize && p.kept?.length && p.snapshots) {
    lines.push(
      'Kept values that differ from rank to rank (other than models and optimizers) do not come back at another ' +
        `size: they stay as the setup cells build them for ${plural(np, 'rank')}. A learning rate the setup scales ` +
        'by hvd.size() is scaled to the new size.'
    );
  }
  lines.push(`Lost: ${back ? 'everything else' : 'everything'} in the ranks' namespaces (variables, models, data).`);
  return lines;
}

/** What a pool's button does, for its tooltip. */
export function actionTitle(p: IPool, action: Action): string {
  if (p.stale) {
    return action === 'stop' ? 'Its kernel died: kill what is left of the pool' : 'Its kernel died: only Stop is left';
  }
  switch (action) {
    case 'where':
      return 'Where every rank is now: cell line, function, the collective it waits in. Changes nothing.';
    case 'interrupt':
      return 'Interrupt the running cell on every rank. The pool and what its ranks hold stay.';
    case 'restart':
      return 'Start the ranks again, at the same or another number of ranks; asks first, and says what comes back.';
    case 'stop':
      return 'End the ranks and the pool; asks first.';
  }
}

/** The pool a command without a pool id acts on: the one of the current notebook's kernel, or the only one. */
export function choosePool(pools: IPool[], kernelId: string | null, selected: string | null): IPool | null {
  const live = pools.filter(p => !p.stale);
  return (
    (kernelId ? pools.find(p => p.kernel_id === kernelId) : undefined) ??
    (selected ? pools.find(p => p.id === selected) : undefined) ??
    (live.length === 1 ? live[0] : pools.length === 1 ? pools[0] : null)
  );
}
