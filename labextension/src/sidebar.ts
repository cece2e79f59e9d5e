import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';

import {
  Action,
  asOfCell,
  confirmation,
  hvdCellFirstLine,
  ICellSeen,
  IConfirmation,
  IPending,
  IPool,
  IPoolList,
  pending,
  pendingDone,
  pendingPool,
  restartBody
} from './model';
import { ActionQuestion } from './question';
import { renderPools } from './render';
import { requestAPI } from './request';

/** Ask `question` in a dialog (its paragraphs follow its size field: `linesAt`); whether the user went on, and the
 * number of ranks asked for where it has a size field. */
async function confirmed(
  question: IConfirmation,
  linesAt?: (np: number) => string[]
): Promise<{ accept: boolean; np: number | null }> {
  const body = new ActionQuestion(question, linesAt);
  const result = await showDialog({
    title: question.title,
    body,
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: question.accept })],
    focusNodeSelector: question.size ? 'input' : undefined
  });
  return { accept: result.button.accept, np: result.value };
}

/**
 * The left-sidebar panel: every jupyter-hvd pool of this server and its ranks, refreshed about once a second
 * while visible (the poll stands by when the panel or the browser tab is hidden, and backs off on errors).
 */
export class HvdSidebar extends Widget {
  readonly poll: Poll;
  pools: IPool[] = [];
  selected: string | null = null;
  /** Actions asked for from here that have not finished, by pool id: that pool's buttons wait for them. */
  pending = new Map<string, IPending>();
  /** The `%%hvd` cell this page last saw begin in each kernel (by kernel id), for the time its pool file lags. */
  cellsSeen = new Map<string, ICellSeen>();
  /** Called before each refresh: the plugin connects the notebooks opened since to `noteExecution`. */
  beforeRefresh: () => void = () => undefined;
  private _list: HTMLElement;
  private _error = '';
  /** The server's clock at its last answer (epoch s), and the server's clock minus this page's (s). */
  private _now = 0;
  private _clockOffset = 0;

  constructor(refreshMs = 1000) {
    super();
    this.id = 'jupyter-hvd-sidebar';
    this.addClass('jp-HvdSidebar');
    this.title.caption = 'Horovod pools (jupyter-hvd)';
    const header = document.createElement('div');
    header.className = 'jp-HvdSidebar-header';
    header.textContent = 'Horovod pools';
    this._list = document.createElement('div');
    this._list.className = 'jp-HvdSidebar-list';
    this.node.append(header, this._list);
    this.node.addEventListener('click', this._onClick);
    this.poll = new Poll({
      factory: () => this.refresh(),
      frequency: { interval: refreshMs, backoff: true, max: 30 * 1000 },
      // Hidden panel or hidden tab: no requests at all until it is shown again.
      standby: () => !this.isVisible || 'when-hidden',
      name: 'jupyter-hvd:pools'
    });
  }

  /** Ask the server for the pools now and redraw. */
  async refresh(): Promise<void> {
    this.beforeRefresh();
    try {
      const data = await requestAPI<IPoolList>('pools');
      this.pools = data.pools;
      this._now = data.now;
      this._clockOffset = data.now - Date.now() / 1000;
      this._error = '';
      for (const [id, job] of [...this.pending]) {
        const p = pendingPool(job, this.pools);
        if (p && p.id !== id) {
          // A restart at another size: the new pool of the same kernel waits for it now.
          this.pending.delete(id);
          this.pending.set(p.id, job);
          this.selected = this.selected === id ? p.id : this.selected;
        }
        if (pendingDone(job, p)) {
          this.pending.delete(p?.id ?? id);
        }
      }
    } catch (error) {
      this._error = `Could not reach the jupyter-hvd server extension: ${error}`;
      this._render();
      throw error; // the poll backs off while the server does not answer
    }
    this._render();
  }

  /** A notebook's kernel `kernelId` began running `code` (its execute_input message): where it is a `%%hvd` cell,
   * its pool runs a new cell from now on, whatever the pool file still says. */
  noteExecution(kernelId: string, code: string, atMs = Date.now(), request?: string): void {
    const firstLine = hvdCellFirstLine(code);
    if (firstLine === null) {
      return;
    }
    this.cellsSeen.set(kernelId, { at: atMs / 1000 + this._clockOffset, firstLine, request });
    this._render();
  }

  /** A notebook's kernel `kernelId` finished `request` (it went idle after it): where that was the `%%hvd` cell it
   * began last, its pool no longer runs it, whatever the pool file still says. */
  noteIdle(kernelId: string, request: string, atMs = Date.now()): void {
    const seen = this.cellsSeen.get(kernelId);
    if (!seen || seen.request !== request || seen.ended !== undefined) {
      return;
    }
    this.cellsSeen.set(kernelId, { ...seen, ended: atMs / 1000 + this._clockOffset });
    this._render();
  }

  /** The pools as they are now: the file's, or, where this page saw a cell begin that the file does not know yet,
   * that cell running. */
  shownPools(): IPool[] {
    return this.pools.map(p => asOfCell(p, this.cellsSeen.get(p.kernel_id), this._now));
  }

  /** Carry out `action` on pool `poolId`, asking first when it would destroy what the ranks hold (Restart: at how
   * many ranks; {"np": N} is sent only for another number than the pool's). */
  async act(poolId: string, action: Action): Promise<boolean> {
    const pool = this.shownPools().find(p => p.id === poolId);
    if (!pool || this.pending.has(poolId)) {
      return false;
    }
    const question = confirmation(pool, action);
    let np: number | null = null;
    if (question) {
      const answer = await confirmed(question, n => confirmation(pool, action, n)?.lines ?? question.lines);
      if (!answer.accept) {
        return false;
      }
      np = answer.np;
    }
    // Its buttons wait until the pool shows it is done.
    this.pending.set(poolId, pending(pool, action, Date.now(), np ?? undefined));
    this._render();
    const body = action === 'restart' ? restartBody(pool, np) : undefined;
    try {
      const init: RequestInit = body ? { method: 'POST', body } : { method: 'POST' };
      await requestAPI(`pools/${encodeURIComponent(poolId)}/${action}`, init);
    } catch (error) {
      this.pending.delete(poolId);
      this._render();
      throw error;
    }
    void this.poll.refresh();
    return true;
  }

  protected onAfterShow(): void {
    void this.poll.refresh();
  }

  dispose(): void {
    this.poll.dispose();
    super.dispose();
  }

  private _render(): void {
    renderPools(this._list, this.shownPools(), this._error, this.pending);
  }

  private _onClick = (event: MouseEvent): void => {
    const target = event.target as HTMLElement;
    const button = target.closest('button[data-action]') as HTMLButtonElement | null;
    const poolBox = target.closest('[data-pool-id]') as HTMLElement | null;
    if (poolBox) {
      this.selected = poolBox.dataset.poolId || null;
    }
    if (button && !button.disabled) {
      void this.act(button.dataset.poolId!, button.dataset.action as Action).catch(error =>
        showDialog({ title: 'jupyter-hvd', body: String(error), buttons: [Dialog.okButton()] })
      );
    }
  };
}
