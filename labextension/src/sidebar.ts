import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';

import {
  Action,
  confirmation,
  IConfirmation,
  IPending,
  IPool,
  IPoolList,
  pending,
  pendingDone
} from './model';
import { renderPools } from './render';
import { requestAPI } from './request';

/** Ask `question` in a dialog, one paragraph per line; whether the user went on. */
async function confirmed(question: IConfirmation): Promise<boolean> {
  const body = new Widget();
  body.addClass('jp-HvdConfirm');
  for (const line of question.lines) {
    const paragraph = document.createElement('p');
    paragraph.textContent = line;
    body.node.appendChild(paragraph);
  }
  const result = await showDialog({
    title: question.title,
    body,
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: question.accept })]
  });
  return result.button.accept;
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
  private _list: HTMLElement;
  private _error = '';

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
    try {
      const data = await requestAPI<IPoolList>('pools');
      this.pools = data.pools;
      this._error = '';
      for (const [id, job] of this.pending) {
        if (pendingDone(job, this.pools.find(p => p.id === id) ?? null)) {
          this.pending.delete(id);
        }
      }
    } catch (error) {
      this._error = `Could not reach the jupyter-hvd server extension: ${error}`;
      this._render();
      throw error; // the poll backs off while the server does not answer
    }
    this._render();
  }

  /** Carry out `action` on pool `poolId`, asking first when it would destroy what the ranks hold. */
  async act(poolId: string, action: Action): Promise<boolean> {
    const pool = this.pools.find(p => p.id === poolId);
    if (!pool || this.pending.has(poolId)) {
      return false;
    }
    const question = confirmation(pool, action);
    if (question && !(await confirmed(question))) {
      return false;
    }
    this.pending.set(poolId, pending(pool, action)); // its buttons wait until the pool shows it is done
    this._render();
    try {
      await requestAPI(`pools/${encodeURIComponent(poolId)}/${action}`, { method: 'POST' });
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
    renderPools(this._list, this.pools, this._error, this.pending);
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
