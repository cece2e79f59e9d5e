/**
 * The sidebar's DOM, built from the pool list. Plain DOM (no framework, no JupyterLab imports): each refresh
 * replaces the content, buttons carry their pool and action in data attributes.
 */

import {
  actionTitle,
  allowedActions,
  formatKept,
  formatDuration,
  formatLoss,
  formatLossShort,
  formatMemory,
  formatMs,
  formatStep,
  formatUsage,
  IPending,
  IPool,
  IRank,
  paceTitle,
  pendingText,
  poolTitle,
  poolWarnings,
  whereIsCurrent
} from './model';

const LABELS = { where: 'Where', interrupt: 'Interrupt', restart: 'Restart', stop: 'Stop' };

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

function badge(state: string): HTMLElement {
  const b = el('span', 'jp-HvdState', state);
  b.dataset.state = state;
  return b;
}

/** Everything known about a rank, for the tooltip of its one-line row. */
export function rankTitle(r: IRank): string {
  const lines = [
    `rank ${r.rank}: ${r.state}`,
    `host ${r.host}, pid ${r.pid}, device ${r.device}`,
    `${formatMemory(r)} · heartbeat ${formatDuration(r.heartbeat_age)} ago`
  ];
  if (r.step !== null && r.step !== undefined) {
    const loss = r.loss !== null && r.loss !== undefined ? ` · loss ${formatLoss(r.loss)}` : '';
    lines.push(`${stepsText(r.step)}${loss}`);
  }
  if (r.state === 'stalled' && r.stalled_on) {
    lines.push(`stalled in ${r.stalled_on}`);
  }
  if (r.last_line) {
    lines.push(`last line: ${r.last_line}`);
  }
  return lines.join('\n');
}

/** "192 steps": the count says its unit, so it is not read as the epoch the live view shows. */
function stepsText(step: number): string {
  return `${step} step${step === 1 ? '' : 's'}`;
}

/** The columns of the rank table: header (its word, then its unit), its tooltip, the class of its cells. */
const COLUMNS: [string, string, string, string][] = [
  ['rank', '', 'rank, and its state as a colour: idle, busy, stalled (in a collective), dead', 'jp-HvdRank-rank'],
  [
    'steps',
    '',
    'steps the rank has taken in the running (or last) cell: the step it printed or reported (step N, a progress ' +
      'bar, report(step=...)), else the optimizer steps counted (one per gradient allreduce). Not epochs: an ' +
      'epoch is many steps.',
    'jp-HvdRank-step'
  ],
  ['loss', '', 'the last loss the rank reported (report(), a progress bar, a printed line)', 'jp-HvdRank-loss'],
  ['compute', 'ms', 'milliseconds per step computing, recent mean', 'jp-HvdRank-compute'],
  ['wait', 'ms', 'milliseconds per step waiting for the other ranks in collectives, recent mean', 'jp-HvdRank-wait'],
  ['load', '%, memory', 'GPU (or CPU) utilisation and memory', 'jp-HvdRank-usage']
];

/** A rank: its figures on one row, and under them, across the table, its last output line (wrapped) and, where
 * the sidebar is too narrow for the load column, its load. The rest is in the row's tooltip. */
function rankRows(r: IRank, straggler: boolean): HTMLTableRowElement[] {
  const row = el('tr', 'jp-HvdRank');
  row.dataset.rank = String(r.rank);
  row.dataset.state = r.state;
  row.dataset.pid = String(r.pid);
  if (straggler) {
    row.dataset.straggler = 'true';
  }
  row.title = rankTitle(r);
  const rankCell = el('td', COLUMNS[0][3]);
  const dot = el('span', 'jp-HvdState jp-HvdState-dot');
  dot.dataset.state = r.state;
  dot.setAttribute('aria-label', r.state);
  rankCell.append(dot, String(r.rank));
  const compute = el('td', COLUMNS[3][3], formatMs(r.compute_ms));
  const wait = el('td', COLUMNS[4][3], formatMs(r.wait_ms));
  compute.title = wait.title = paceTitle(r);
  row.append(
    rankCell,
    el('td', COLUMNS[1][3], formatStep(r.step)),
    el('td', COLUMNS[2][3], formatLossShort(r.loss)),
    compute,
    wait,
    el('td', COLUMNS[5][3], formatUsage(r))
  );
  const under = el('tr', 'jp-HvdRank-under');
  under.dataset.rank = String(r.rank);
  if (straggler) {
    under.dataset.straggler = 'true';
  }
  under.title = row.title;
  const cell = el('td', '');
  cell.colSpan = COLUMNS.length;
  const stalled = r.state === 'stalled' && r.stalled_on;
  const load = el('span', 'jp-HvdRank-loadInline', formatUsage(r));
  load.title = 'load: GPU (or CPU) utilisation and memory';
  const said = stalled ? `waits in ${r.stalled_on}` : r.last_line || '';
  cell.append(load);
  if (said) {
    cell.appendChild(el('span', 'jp-HvdRank-line', said));
  }
  under.appendChild(cell);
  return [row, under];
}

/** One pool: title with state, its figures, the running cell, its buttons (none while an action asked for from
 * here runs: `pending`), and a table of its ranks. */
export function renderPool(p: IPool, pending?: IPending | null, now = Date.now()): HTMLElement {
  const box = el('div', 'jp-HvdPool');
  box.dataset.poolId = p.id;
  box.dataset.state = p.state;
  const title = el('div', 'jp-HvdPool-title');
  const name = el('span', 'jp-HvdPool-notebook', poolTitle(p));
  name.title = `${p.notebook || p.id} (pool ${p.id}, kernel ${p.kernel_id})`;
  title.append(name, badge(p.state));
  box.appendChild(title);
  const hosts = p.hosts.length > 2 ? `${p.hosts.slice(0, 2).join(', ')} +${p.hosts.length - 2}` : p.hosts.join(', ');
  const meta = el(
    'div',
    'jp-HvdPool-meta',
    `up ${formatDuration(p.uptime)} · ${p.np} ranks · ${p.backend || '–'} · ${hosts || '–'}`
  );
  meta.title = `up: since the running engines started (a restart starts new ones); hosts: ${p.hosts.join(', ')}`;
  box.appendChild(meta);
  if (p.stale) {
    box.appendChild(
      el('div', 'jp-HvdPool-meta', 'Its kernel died: what is left of the pool is killed shortly (or click Stop).')
    );
  }
  if (p.cell) {
    const cell = el('div', 'jp-HvdPool-cell', `▶ ${p.cell}`);
    cell.title = p.cell;
    if (p.cell_own) {
      cell.dataset.own = 'true'; // jupyter-hvd's own work, in words: in the UI's font, not the code's
    }
    box.appendChild(cell);
  }
  const actions = el('div', 'jp-HvdPool-actions');
  const allowed = pending ? [] : allowedActions(p);
  for (const action of ['where', 'interrupt', 'restart', 'stop'] as const) {
    const button = el('button', 'jp-mod-styled jp-HvdPool-action', LABELS[action]);
    button.dataset.action = action;
    button.dataset.poolId = p.id;
    button.disabled = !allowed.includes(action);
    button.title = actionTitle(p, action);
    actions.appendChild(button);
  }
  box.appendChild(actions);
  if (pending) {
    box.appendChild(el('div', 'jp-HvdPool-note jp-HvdPool-pending', pendingText(pending, now)));
  }
  const kept = formatKept(p);
  if (kept) {
    box.appendChild(el('div', 'jp-HvdPool-meta jp-HvdPool-kept', kept));
  }
  if (p.where && whereIsCurrent(p)) {
    const at = new Date(p.where.asked * 1000).toTimeString().slice(0, 8); // HH:MM:SS, local
    const where = el('div', 'jp-HvdPool-where', '');
    where.appendChild(el('div', 'jp-HvdPool-whereTitle', `Where the ranks were at ${at} (${p.where.why})`));
    where.appendChild(el('pre', 'jp-HvdPool-wherePlaces', p.where.text));
    box.appendChild(where);
  }
  for (const w of poolWarnings(p)) {
    const line = el('div', 'jp-HvdPool-warning', `⚠ ${w.text}`);
    line.dataset.kind = w.kind;
    box.appendChild(line);
  }
  const table = el('table', 'jp-HvdRanks');
  const head = el('tr', '');
  for (const [label, unit, title, className] of COLUMNS) {
    const th = el('th', className, label);
    if (unit) {
      th.appendChild(el('span', 'jp-HvdRanks-unit', unit));
    }
    th.title = title;
    head.appendChild(th);
  }
  const thead = el('thead', '');
  thead.appendChild(head);
  const tbody = el('tbody', '');
  p.ranks.forEach(r => tbody.append(...rankRows(r, p.straggler?.rank === r.rank)));
  table.append(thead, tbody);
  box.appendChild(table);
  return box;
}

/** The whole list; a short explanation when there is no pool, or the last error when the server did not answer.
 * `pending`: the actions asked for from this sidebar that have not finished, by pool id. */
export function renderPools(
  target: HTMLElement,
  pools: IPool[],
  error?: string,
  pending: Map<string, IPending> = new Map()
): void {
  target.replaceChildren();
  if (error) {
    target.appendChild(el('div', 'jp-HvdSidebar-error', error));
  }
  if (!pools.length && !error) {
    target.appendChild(
      el('div', 'jp-HvdSidebar-empty', 'No jupyter-hvd pool is running. Start one in a notebook: %hvd_start -np 2')
    );
  }
  pools.forEach(p => target.appendChild(renderPool(p, pending.get(p.id))));
}
