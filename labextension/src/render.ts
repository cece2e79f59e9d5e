/**
 * The sidebar's DOM, built from the pool list. Plain DOM (no framework, no JupyterLab imports): each refresh
 * replaces the content, buttons carry their pool and action in data attributes.
 */

import {
  allowedActions,
  formatDuration,
  formatLoss,
  formatMemory,
  IPool,
  IRank,
  poolTitle
} from './model';

const LABELS = { interrupt: 'Interrupt', restart: 'Restart', stop: 'Stop' };

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

/** A rank's figures on one line: memory, step and loss (when the cell reports them), heartbeat age. */
export function rankFigures(r: IRank): string {
  const parts = [formatMemory(r)];
  if (r.step !== null && r.step !== undefined) {
    parts.push(`step ${r.step}`);
  }
  if (r.loss !== null && r.loss !== undefined) {
    parts.push(`loss ${formatLoss(r.loss)}`);
  }
  parts.push(`beat ${formatDuration(r.heartbeat_age)}`);
  return parts.join(' · ');
}

/** Up to three rows per rank, to fit a narrow sidebar: who and where; its figures; its last output line. */
function rankRows(r: IRank): HTMLTableRowElement[] {
  const row = el('tr', 'jp-HvdRank');
  row.dataset.rank = String(r.rank);
  row.dataset.state = r.state;
  row.dataset.pid = String(r.pid);
  const stateCell = el('td', '');
  stateCell.appendChild(badge(r.state));
  const where = el('td', 'jp-HvdRank-where', `${r.host}:${r.pid} · ${r.device}`);
  where.title = `host ${r.host}, pid ${r.pid}, device ${r.device}`;
  row.append(el('td', '', String(r.rank)), stateCell, where);
  const rows = [row];
  const figures = el('tr', 'jp-HvdRank-figuresRow');
  figures.appendChild(el('td', '', ''));
  const text = el('td', 'jp-HvdRank-figures', rankFigures(r));
  text.colSpan = 2;
  figures.appendChild(text);
  rows.push(figures);
  if (r.last_line) {
    const lineRow = el('tr', 'jp-HvdRank-lastLine');
    lineRow.appendChild(el('td', '', ''));
    const line = el('td', 'jp-HvdRank-line', r.last_line);
    line.colSpan = 2;
    line.title = r.last_line;
    lineRow.appendChild(line);
    rows.push(lineRow);
  }
  return rows;
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
  for (const action of ['interrupt', 'restart', 'stop'] as const) {
    const button = el('button', 'jp-mod-styled jp-HvdPool-action', LABELS[action]);
    button.dataset.action = action;
    button.dataset.poolId = p.id;
    button.disabled = !allowed.includes(action);
    button.title = p.stale && action === 'stop' ? 'Its kernel died: kill what is left of the pool' : LABELS[action];
    actions.appendChild(button);
  }
  box.appendChild(actions);
  const table = el('table', 'jp-HvdRanks');
  const head = el('tr', '');
  for (const h of ['rank', 'state', 'host:pid · device']) {
    head.appendChild(el('th', '', h));
  }
  const thead = el('thead', '');
  thead.appendChild(head);
  const tbody = el('tbody', '');
  p.ranks.forEach(r => rankRows(r).forEach(row => tbody.appendChild(row)));
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
