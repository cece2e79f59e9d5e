import { CommandRegistry } from '@lumino/commands';
import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';
import { afterEach, describe, expect, it, vi } from 'vitest';

import plugin from '../src/index';
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
