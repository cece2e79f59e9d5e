/**
 * The sidebar's DOM, built from the pool list. Plain DOM (no framework, no JupyterLab imports): each refresh
 * replaces the content, buttons carry their pool and action in data attributes.
 */

import {
  allowedActions,
  formatKept,
  formatDuration,
  formatLoss,
  formatLossShort,
  formatMemory,
  formatPace,
  formatStep,
  formatUsage,
  IPool,
  IRank,
  paceTitle,
  poolTitle,
  poolWarnings
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
    lines.push(`step ${r.step}` + (r.loss !== null && r.loss !== undefined ? ` · loss ${formatLoss(r.loss)}` : ''));
  }
  if (r.state === 'stalled' && r.stalled_on) {
    lines.push(`stalled in ${r.stalled_on}`);
  }
  if (r.last_line) {
    lines.push(`last line: ${r.last_line}`);
  }
  return lines.join('\n');
}

/** The columns of the rank table: header, tooltip of the header, class of the cells. */
const COLUMNS: [string, string, string][] = [
  ['rank', 'rank, and its state as a colour: idle, busy, stalled (in a collective), dead', 'jp-HvdRank-rank'],
  ['step', 'the last step the rank reported', 'jp-HvdRank-step'],
  ['loss', 'the last loss the rank reported', 'jp-HvdRank-loss'],
  ['c/w ms', 'milliseconds per step computing / waiting for the other ranks (recent mean)', 'jp-HvdRank-pace'],
  ['load', 'GPU (or CPU) utilisation and memory', 'jp-HvdRank-usage'],
  ['last line', "the rank's last output line (or what it waits in)", 'jp-HvdRank-line']
];

/** One table row per rank, one line high at the sidebar's default width; the rest is in its tooltip. */
function rankRow(r: IRank, straggler: boolean): HTMLTableRowElement {
  const row = el('tr', 'jp-HvdRank');
  row.dataset.rank = String(r.rank);
  row.dataset.state = r.state;
  row.dataset.pid = String(r.pid);
  if (straggler) {
    row.dataset.straggler = 'true';
  }
  row.title = rankTitle(r);
  const rankCell = el('td', COLUMNS[0][2]);
  const dot = el('span', 'jp-HvdState jp-HvdState-dot');
  dot.dataset.state = r.state;
  dot.setAttribute('aria-label', r.state);
  rankCell.append(dot, String(r.rank));
  const pace = el('td', COLUMNS[3][2], formatPace(r));
  pace.title = paceTitle(r);
  const stalled = r.state === 'stalled' && r.stalled_on;
  const line = el('td', COLUMNS[5][2], stalled ? `waits in ${r.stalled_on}` : r.last_line || '');
  row.append(
    rankCell,
    el('td', COLUMNS[1][2], formatStep(r.step)),
    el('td', COLUMNS[2][2], formatLossShort(r.loss)),
    pace,
    el('td', COLUMNS[4][2], formatUsage(r)),
    line
  );
  return row;
}

/** One pool: title with state, its figures, the running cell, its buttons, and a table of its ranks. */
export function renderPool(p: IPool): HTMLElement {
  const box = el('div', 'jp-HvdPool');
  box.dataset.poolId = p.id;
  box.dataset.state = p.state;
  const title = el('div', 'jp-HvdPool-title');
  const name = el('span', 'jp-HvdPool-notebook', poolTitle(p));
  name.title = `${p.notebook || p.id} (pool ${p.id}, kernel ${p.kernel_id})`;
  title.append(name, badge(p.state));
  box.appendChild(title);
  const hosts = p.hosts.length ? p.hosts.join(', ') : '–';
  box.appendChild(
    el('div', 'jp-HvdPool-meta', `-np ${p.np} · ${p.backend || '–'} · ${hosts} · up ${formatDuration(p.uptime)}`)
  );
  if (p.stale) {
    box.appendChild(
      el('div', 'jp-HvdPool-meta', 'Its kernel died: what is left of the pool is killed shortly (or click Stop).')
    );
  }
  if (p.cell) {
    const cell = el('div', 'jp-HvdPool-cell', `▶ ${p.cell}`);
    cell.title = p.cell;
    box.appendChild(cell);
  }
  const actions = el('div', 'jp-HvdPool-actions');
  const allowed = allowedActions(p);
  for (const action of ['where', 'interrupt', 'restart', 'stop'] as const) {
    const button = el('button', 'jp-mod-styled jp-HvdPool-action', LABELS[action]);
    button.dataset.action = action;
    button.dataset.poolId = p.id;
    button.disabled = !allowed.includes(action);
    button.title =
      p.stale && action === 'stop'
        ? 'Its kernel died: kill what is left of the pool'
        : action === 'where'
          ? 'Where every rank is now: cell line, function, the collective it waits in'
          : LABELS[action];
    actions.appendChild(button);
  }
  box.appendChild(actions);
  const kept = formatKept(p);
  if (kept) {
    box.appendChild(el('div', 'jp-HvdPool-meta jp-HvdPool-kept', kept));
  }
  if (p.where) {
    const [at, ...places] = p.where.split('\n');
    const where = el('div', 'jp-HvdPool-where', '');
    where.appendChild(el('div', 'jp-HvdPool-whereTitle', `Where the ranks were at ${at}`));
    where.appendChild(el('pre', 'jp-HvdPool-wherePlaces', places.join('\n')));
    box.appendChild(where);
  }
  for (const w of poolWarnings(p)) {
    const line = el('div', 'jp-HvdPool-warning', `⚠ ${w.text}`);
    line.dataset.kind = w.kind;
    box.appendChild(line);
  }
  const table = el('table', 'jp-HvdRanks');
  const head = el('tr', '');
  for (const [label, title, className] of COLUMNS) {
    const th = el('th', className, label);
    th.title = title;
    head.appendChild(th);
  }
  const thead = el('thead', '');
  thead.appendChild(head);
  const tbody = el('tbody', '');
  p.ranks.forEach(r => tbody.appendChild(rankRow(r, p.straggler?.rank === r.rank)));
  table.append(thead, tbody);
  box.appendChild(table);
  return box;
}

/** The whole list; a short explanation when there is no pool, or the last error when the server did not answer. */
export function renderPools(target: HTMLElement, pools: IPool[], error?: string): void {
  target.replaceChildren();
  if (error) {
    target.appendChild(el('div', 'jp-HvdSidebar-error', error));
  }
  if (!pools.length && !error) {
    target.appendChild(
      el('div', 'jp-HvdSidebar-empty', 'No jupyter-hvd pool is running. Start one in a notebook: %hvd_start -np 2')
    );
  }
  pools.forEach(p => target.appendChild(renderPool(p)));
}
