import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, ISessionContext } from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { LabIcon } from '@jupyterlab/ui-components';

import { Action, ACTIONS, choosePool } from './model';
import { HvdSidebar } from './sidebar';

// Its name, as IPython Parallel's panel shows "IP": the sidebar's tab says whose it is at a glance.
const ICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16">
  <g class="jp-icon3" fill="#616161">
    <text x="12" y="16.5" text-anchor="middle" font-family="DejaVu Sans, Verdana, Arial, sans-serif" font-weight="700"
      font-size="11" letter-spacing="-0.6">hvd</text>
  </g></svg>`;

export const hvdIcon = new LabIcon({ name: 'jupyter-hvd:pools', svgstr: ICON_SVG });

const LABELS: Record<Action, string> = {
  where: 'Where are the ranks of the jupyter-hvd pool (cell line, function, collective)',
  interrupt: 'Interrupt jupyter-hvd pool (stops the running cell on all ranks)',
  restart: 'Restart jupyter-hvd pool (asks at how many ranks)',
  stop: 'Stop jupyter-hvd pool'
};

/**
 * The left-sidebar panel of jupyter-hvd pools, with Interrupt / Restart / Stop commands.
 *
 * Only `app.shell` is used (add, currentWidget, activateById): JupyterLab's ILabShell and Notebook 7's shell
 * both implement it, so the plugin activates in both. In JupyterLab `app.shell` is the ILabShell itself.
 */
const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-hvd:plugin',
  description: 'Every jupyter-hvd pool and every rank, with Interrupt / Restart / Stop.',
  autoStart: true,
  optional: [ILayoutRestorer, ICommandPalette, ISettingRegistry],
  activate: async (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    settings: ISettingRegistry | null
  ) => {
    let refreshMs = 1000;
    if (settings) {
      try {
        const s = await settings.load(plugin.id);
        refreshMs = (s.get('refreshMs').composite as number) || refreshMs;
      } catch (error) {
        console.warn('jupyter-hvd: settings not loaded, refreshing every second', error);
      }
    }
    const { shell } = app;
    const sidebar = new HvdSidebar(refreshMs);
    sidebar.title.icon = hvdIcon;
    shell.add(sidebar, 'left', { rank: 750 });
    if (restorer) {
      restorer.add(sidebar, 'jupyter-hvd-sidebar');
    }

    // Every notebook's kernel messages: the sidebar sees a %%hvd cell begin and end at once (the pool file says it
    // within a second or so), so the previous cell's figures are not shown as the new cell's, nor a short cell that
    // ended as running.
    const watched = new WeakSet<ISessionContext>();
    sidebar.beforeRefresh = () => {
      for (const widget of shell.widgets('main')) {
        const context = (widget as any).sessionContext as ISessionContext | undefined;
        if (!context?.iopubMessage || watched.has(context)) {
          continue;
        }
        watched.add(context);
        context.iopubMessage.connect((_, msg) => {
          const kernelId = context.session?.kernel?.id;
          const request = String((msg.parent_header as { msg_id?: string })?.msg_id ?? '');
          if (msg.header.msg_type === 'execute_input' && kernelId) {
            sidebar.noteExecution(kernelId, String((msg.content as { code?: string }).code ?? ''), Date.now(), request);
          } else if (
            msg.header.msg_type === 'status' &&
            kernelId &&
            request &&
            (msg.content as { execution_state?: string }).execution_state === 'idle'
          ) {
            sidebar.noteIdle(kernelId, request);
          }
        });
      }
    };

    // The notebook in the main area (JupyterLab: the focused one; Notebook 7: the page's only one).
    const currentKernelId = (): string | null => {
      const widget = shell.currentWidget as any;
      return widget?.sessionContext?.session?.kernel?.id ?? null;
    };
    for (const action of ACTIONS) {
      const command = `jupyter-hvd:${action}`;
      app.commands.addCommand(command, {
        label: LABELS[action],
        caption: LABELS[action],
        execute: async args => {
          if (!sidebar.pools.length) {
            await sidebar.refresh().catch(() => undefined);
          }
          const poolId =
            (args.poolId as string | undefined) ??
            choosePool(sidebar.pools, currentKernelId(), sidebar.selected)?.id;
          if (!poolId) {
            shell.activateById(sidebar.id);
            return false;
          }
          return sidebar.act(poolId, action);
        }
      });
      palette?.addItem({ command, category: 'jupyter-hvd' });
    }
  }
};

export default plugin;
