import { CommandRegistry } from '@lumino/commands';
import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';
import { afterEach, describe, expect, it, vi } from 'vitest';

import plugin from '../src/index';
import { IPool } from '../src/model';
import { requestAPI } from '../src/request';
import { HvdSidebar } from '../src/sidebar';
import { pool, rank } from './fixtures';

vi.mock('../src/request', () => ({ requestAPI: vi.fn() }));
const request = vi.mocked(requestAPI);

/**
 * A shell with only what every Jupyter front end's shell has (JupyterFrontEnd.IShell), as Notebook 7's:
 * no ILabShell. `main` stands for the widget in the main area.
 */
function fakeApp(main: Widget | null = null) {
  const added: { widget: Widget; area?: string; rank?: number }[] = [];
  const activated: string[] = [];
  const shell = {
    currentWidget: main,
    add: (widget: Widget, area?: string, options?: { rank?: number }) =>
      added.push({ widget, area, rank: options?.rank }),
    activateById: (id: string) => activated.push(id),
    widgets: (area?: string) => (area === 'main' ? [main ?? []].flat() : added.map(a => a.widget))[Symbol.iterator]()
  };
  const app = { commands: new CommandRegistry(), shell };
  return { app: app as any, added, activated };
}

/** A notebook panel as far as the plugin looks at it: its session's kernel. */
function notebookOn(kernelId: string): Widget {
  return Object.assign(new Widget(), { sessionContext: { session: { kernel: { id: kernelId } } } });
}

const activate = (app: any, restorer: any = null, palette: any = null) =>
  (plugin.activate as (...args: any[]) => Promise<void>)(app, restorer, palette, null);

afterEach(() => {
  request.mockReset();
});

describe('the plugin outside JupyterLab (Notebook 7)', () => {
  it('requires no service, so no front end lacks a provider for it', () => {
    expect(plugin.requires ?? []).toEqual([]);
  });

  it('adds the sidebar to the left area and registers its commands with only the generic shell', async () => {
    const { app, added } = fakeApp();
    await activate(app);
    expect(added).toHaveLength(1);
    expect(added[0]).toMatchObject({ area: 'left', rank: 750 });
    expect(added[0].widget.id).toBe('jupyter-hvd-sidebar');
    for (const action of ['interrupt', 'restart', 'stop']) {
      expect(app.commands.hasCommand(`jupyter-hvd:${action}`)).toBe(true);
    }
    added[0].widget.dispose();
  });

  it("interrupts the pool of the notebook in the shell's main area", async () => {
    const { app, added } = fakeApp(notebookOn('k-2'));
    await activate(app);
    request.mockResolvedValueOnce({ pools: [pool(), pool({ id: 'hvd-2-1', kernel_id: 'k-2' })] });
    request.mockResolvedValue({});
    await expect(app.commands.execute('jupyter-hvd:interrupt')).resolves.toBe(true);
    expect(request).toHaveBeenLastCalledWith('pools/hvd-2-1/interrupt', { method: 'POST' });
    added[0].widget.dispose();
  });

  it('shows the sidebar when there is no pool to act on', async () => {
    const { app, added, activated } = fakeApp();
    await activate(app);
    request.mockResolvedValue({ pools: [] });
    await expect(app.commands.execute('jupyter-hvd:stop')).resolves.toBe(false);
    expect(activated).toEqual(['jupyter-hvd-sidebar']);
    added[0].widget.dispose();
  });
});

describe('the plugin in JupyterLab', () => {
  it('restores the sidebar and puts its commands in the palette', async () => {
    const { app, added } = fakeApp();
    const restorer = { add: vi.fn() };
    const palette = { addItem: vi.fn() };
    await activate(app, restorer, palette);
    expect(restorer.add).toHaveBeenCalledWith(added[0].widget, 'jupyter-hvd-sidebar');
    expect(palette.addItem.mock.calls.map(c => c[0].command)).toEqual([
      'jupyter-hvd:where',
      'jupyter-hvd:interrupt',
      'jupyter-hvd:restart',
      'jupyter-hvd:stop'
    ]);
    added[0].widget.dispose();
  });
});

describe("the sidebar and the notebooks' kernels", () => {
  it("shows a %%hvd cell running as soon as its kernel begins it, without the previous cell's figures", async () => {
    const iopub = new Signal<unknown, any>({});
    const notebook = Object.assign(new Widget(), {
      sessionContext: { session: { kernel: { id: 'k-1' } }, iopubMessage: iopub }
    });
    const { app, added } = fakeApp(notebook);
    await activate(app);
    const sidebar = added[0].widget as HvdSidebar;
    const previous = pool({ updated_age: 0.5, ranks: [rank({ step: 192, last_line: 'epoch 8 loss=0.005' })] });
    request.mockResolvedValue({ pools: [previous], now: Date.now() / 1000 });
    await sidebar.refresh(); // connects to the notebook's kernel messages, then shows the pool file
    const step = () => sidebar.node.querySelector('tr.jp-HvdRank .jp-HvdRank-step')!.textContent;
    const state = () => (sidebar.node.querySelector('.jp-HvdPool') as HTMLElement).dataset.state;
    expect([state(), step()]).toEqual(['idle', '192']);
    iopub.emit({ header: { msg_type: 'execute_input' }, content: { code: '%hvd_where' } }); // not a %%hvd cell
    expect([state(), step()]).toEqual(['idle', '192']);
    iopub.emit({ header: { msg_type: 'execute_input' }, content: { code: '%%hvd\nimport time\ntime.sleep(4)' } });
    expect([state(), step()]).toEqual(['running', '–']);
    expect(sidebar.node.querySelector('.jp-HvdPool-cell')!.textContent).toBe('▶ import time');
    expect(sidebar.node.querySelector('.jp-HvdRank-line')).toBeNull();
    sidebar.dispose();
  });
});

describe("the sidebar's Restart at another number of ranks", () => {
  /** The Restart dialog once it is open: its size field, typed into as a user does, and its buttons. */
  async function restartDialog() {
    await vi.waitFor(() => expect(document.querySelector('.jp-Dialog input')).not.toBeNull());
    const dialog = document.querySelector('.jp-Dialog') as HTMLElement;
    const input = dialog.querySelector('input') as HTMLInputElement;
    const accept = dialog.querySelector('button.jp-mod-accept') as HTMLButtonElement;
    const type = (text: string) => {
      input.value = text;
      input.dispatchEvent(new Event('input', { bubbles: true }));
    };
    const lines = () => Array.from(dialog.querySelectorAll('.jp-Dialog-body p')).map(p => p.textContent);
    return { dialog, input, accept, type, lines };
  }

  async function sidebarWith(p = pool({ journal_entries: 1, kept: ['model'], snapshots: 1 })) {
    const { app, added } = fakeApp();
    await activate(app);
    const sidebar = added[0].widget as HvdSidebar;
    request.mockResolvedValue({ pools: [p], now: Date.now() / 1000 });
    await sidebar.refresh();
    request.mockClear();
    request.mockResolvedValue({});
    return { app, sidebar };
  }

  it('sends {"np": 3} when the size changes, and waits for the pool at that size', async () => {
    const { sidebar } = await sidebarWith();
    const acted = sidebar.act('hvd-1-1', 'restart');
    const { input, accept, type, lines } = await restartDialog();
    expect(input.value).toBe('2');
    type('3');
    expect(lines()[0]).toBe('Its 2 ranks end and 3 new ranks start in their place, with the same options otherwise.');
    accept.click();
    await expect(acted).resolves.toBe(true);
    expect(request).toHaveBeenCalledWith('pools/hvd-1-1/restart', { method: 'POST', body: '{"np":3}' });
    expect(sidebar.node.querySelector('.jp-HvdPool-pending')!.textContent).toMatch(
      /^Restarting the pool at 3 ranks \(asked \d+ s ago\)…$/
    );
    sidebar.dispose();
  });

  it('sends no body for the same size (a plain restart), and nothing at all while the size is not one', async () => {
    const { sidebar } = await sidebarWith();
    const acted = sidebar.act('hvd-1-1', 'restart');
    const { accept, type, dialog } = await restartDialog();
    type('0');
    expect(accept.disabled).toBe(true);
    expect(dialog.querySelector('.jp-HvdConfirm-sizeProblem')!.textContent).toBe('At least 1 rank.');
    accept.click(); // a disabled button: nothing happens, the dialog stays
    await new Promise(resolve => setTimeout(resolve, 50));
    expect(document.querySelector('.jp-Dialog')).not.toBeNull();
    expect(request).not.toHaveBeenCalled();
    type('2');
    expect(accept.disabled).toBe(false);
    accept.click();
    await expect(acted).resolves.toBe(true);
    expect(request).toHaveBeenCalledWith('pools/hvd-1-1/restart', { method: 'POST' });
    expect(sidebar.node.querySelector('.jp-HvdPool-pending')!.textContent).toMatch(/^Restarting the pool \(asked/);
    sidebar.dispose();
  });

  it('shows the new pool its kernel started in the old one\'s place as restarting, then with its new ranks', async () => {
    const { sidebar } = await sidebarWith();
    const acted = sidebar.act('hvd-1-1', 'restart');
    const { accept, type } = await restartDialog();
    type('3');
    accept.click();
    await acted;
    const ranks = [0, 1, 2].map(r => rank({ rank: r, pid: 6000 + r }));
    const shown = async (pools: IPool[]) => {
      request.mockResolvedValue({ pools, now: Date.now() / 1000 });
      await sidebar.refresh();
      const box = sidebar.node.querySelector('.jp-HvdPool') as HTMLElement | null;
      return {
        id: box?.dataset.poolId,
        rows: sidebar.node.querySelectorAll('tr.jp-HvdRank').length,
        pending: sidebar.node.querySelector('.jp-HvdPool-pending')?.textContent?.replace(/\(.*\)/, '()') ?? null
      };
    };
    expect(await shown([])).toEqual({ id: undefined, rows: 0, pending: null }); // between the two pools' files
    const next = pool({ id: 'hvd-1-2', np: 3, state: 'running', cell: 'replaying setup entry 1 of 1', ranks });
    expect(await shown([next])).toEqual({ id: 'hvd-1-2', rows: 3, pending: 'Restarting the pool at 3 ranks ()…' });
    expect(await shown([{ ...next, state: 'idle', cell: null }])).toEqual({ id: 'hvd-1-2', rows: 3, pending: null });
    sidebar.dispose();
  });
});
