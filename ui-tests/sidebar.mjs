// End to end in a real browser: JupyterLab (started by tests/test_sidebar_ui.py), headless Chromium.
// Opens a notebook, starts a 2-rank pool, watches the sidebar show it, runs a long cell, interrupts it and
// stops the pool from the sidebar. Prints one JSON line of timings; screenshots go to $ARTIFACTS.
//
// Env: NOTEBOOK_URL (JupyterLab's URL of the notebook, token included), NOTEBOOK (its name), ARTIFACTS, CHROMIUM.
import { openNotebook, runCell, runCheck, showSidebar } from './driver.mjs';

const { NOTEBOOK_URL, NOTEBOOK, ARTIFACTS = 'artifacts/sidebar' } = process.env;

await runCheck({ artifacts: ARTIFACTS, viewport: { width: 1440, height: 900 } }, async ({ page, result, shot }) => {
  const timings = (result.timings = {});
  const rankPids = (result.rankPids = []);
  const t0 = Date.now();
  const dialog = () => page.locator('.jp-Dialog');

  await openNotebook(page, `${NOTEBOOK_URL}&reset`);

  // The sidebar: a tab of its own in the left bar.
  await showSidebar(page);
  const sidebar = page.locator('#jupyter-hvd-sidebar');
  await sidebar.locator('text=No jupyter-hvd pool is running').waitFor({ timeout: 10000 });

  // %hvd_start -np 2: the sidebar shows the pool and its 2 ranks.
  const started = Date.now();
  const first = await runCell(page, 0);
  await first.locator('.jp-OutputArea-output', { hasText: 'Pool ready' }).waitFor({ timeout: 120000 });
  timings.pool_ready_s = (Date.now() - started) / 1000;
  const ranks = sidebar.locator('tr.jp-HvdRank');
  await page.waitForFunction(() => document.querySelectorAll('#jupyter-hvd-sidebar tr.jp-HvdRank').length === 2, null, {
    timeout: 10000
  });
  timings.sidebar_two_ranks_after_ready_s = (Date.now() - started) / 1000 - timings.pool_ready_s;
  const poolBox = sidebar.locator('.jp-HvdPool').first();
  await poolBox.locator('.jp-HvdPool-notebook', { hasText: NOTEBOOK }).waitFor({ timeout: 5000 });
  rankPids.push(...(await ranks.evaluateAll(rows => rows.map(r => Number(r.dataset.pid)))));
  await shot('1-pool-idle');

  // A long cell: both ranks busy, the running cell's first line shown.
  const busyAt = Date.now();
  const second = await runCell(page, 1);
  await page.waitForFunction(
    () =>
      Array.from(document.querySelectorAll('#jupyter-hvd-sidebar tr.jp-HvdRank')).filter(r => r.dataset.state === 'busy')
        .length === 2,
    null,
    { timeout: 15000 }
  );
  timings.ranks_busy_s = (Date.now() - busyAt) / 1000;
  await poolBox.locator('.jp-HvdPool-cell', { hasText: 'import time' }).waitFor({ timeout: 5000 });
  await second.locator('.jp-OutputArea-output', { hasText: 'step 3' }).waitFor({ timeout: 30000 });
  // Live figures of each rank, one line each: CPU and RSS (no GPU here); rank 0 (whose output the cell shows)
  // also its step, read from its printed lines, and its last output line, while the cell runs.
  await page.waitForFunction(
    () => {
      const rows = Array.from(document.querySelectorAll('#jupyter-hvd-sidebar tr.jp-HvdRank'));
      const cell = (row, name) => row.querySelector(`.jp-HvdRank-${name}`)?.textContent || '';
      return (
        rows.length === 2 &&
        /^\d+$/.test(cell(rows[0], 'step')) &&
        rows.every(r => /^\d+% \d+M$/.test(cell(r, 'usage'))) &&
        cell(rows[1], 'step') === '–' &&
        /^step \d+$/.test(rows[0].nextElementSibling?.querySelector('.jp-HvdRank-line')?.textContent || '') &&
        /beat \d+ s ago/.test(rows[1].title)
      );
    },
    null,
    { timeout: 10000 }
  );
  timings.figures_busy = await ranks.evaluateAll(rows => rows.map(r => Array.from(r.cells).map(c => c.textContent)));
  // One line per rank at the sidebar's default width (the layout test checks 8 ranks from a pool file).
  timings.rank_row_heights = await ranks.evaluateAll(rows => rows.map(r => r.getBoundingClientRect().height));
  if (timings.rank_row_heights.some(h => h > 30)) {
    throw new Error(`rank rows taller than one line: ${timings.rank_row_heights}`);
  }
  await shot('2-ranks-busy');

  // Interrupt: no question asked; the cell stops, the ranks return to idle.
  const interruptAt = Date.now();
  await poolBox.locator('button[data-action="interrupt"]').click();
  // The notebook says who stopped the cell.
  await second.locator('.jp-OutputArea-output', { hasText: 'Interrupted from the sidebar' }).waitFor({ timeout: 30000 });
  timings.cell_stopped_s = (Date.now() - interruptAt) / 1000;
  await page.waitForFunction(
    () =>
      Array.from(document.querySelectorAll('#jupyter-hvd-sidebar tr.jp-HvdRank')).filter(r => r.dataset.state === 'idle')
        .length === 2 &&
      document.querySelector('#jupyter-hvd-sidebar .jp-HvdPool')?.dataset.state === 'idle',
    null,
    { timeout: 15000 }
  );
  timings.ranks_idle_after_interrupt_s = (Date.now() - interruptAt) / 1000;
  if ((await page.locator('.jp-Dialog').count()) !== 0) {
    throw new Error('Interrupt asked a question');
  }
  await shot('3-interrupted');

  // Restart (confirmed): new engines, same options; the sidebar shows the new pids.
  const restartAt = Date.now();
  await poolBox.locator('button[data-action="restart"]').click();
  await dialog().locator('text=with the same options').waitFor({ timeout: 5000 });
  await dialog().locator('button.jp-mod-warn').click();
  // While it restarts, the pool's buttons wait, and the sidebar says for what.
  const waiting = await poolBox.evaluate(box => ({
    disabled: Array.from(box.querySelectorAll('button[data-action]')).map(b => b.disabled),
    pending: box.querySelector('.jp-HvdPool-pending')?.textContent || ''
  }));
  if (!waiting.disabled.every(Boolean) || !waiting.pending.startsWith('Restarting the pool')) {
    throw new Error(`during the restart: ${JSON.stringify(waiting)}`);
  }
  await shot('4-restarting');
  await page.waitForFunction(
    old => {
      const rows = Array.from(document.querySelectorAll('#jupyter-hvd-sidebar tr.jp-HvdRank'));
      const pids = rows.map(r => Number(r.dataset.pid));
      return (
        rows.length === 2 &&
        pids.every(p => !old.includes(p)) &&
        document.querySelector('#jupyter-hvd-sidebar .jp-HvdPool')?.dataset.state === 'idle'
      );
    },
    rankPids,
    { timeout: 120000 }
  );
  timings.restart_s = (Date.now() - restartAt) / 1000;
  const newPids = await ranks.evaluateAll(rows => rows.map(r => Number(r.dataset.pid)));
  rankPids.push(...newPids);
  // The uptime is the new engines': it started again.
  const meta = (await poolBox.locator('.jp-HvdPool-meta').first().textContent()) || '';
  timings.uptime_after_restart = meta;
  const up = /^up (\d+) s /.exec(meta);
  if (!up || Number(up[1]) > 60) {
    throw new Error(`the uptime was not reset by the restart: ${meta}`);
  }
  await page.waitForFunction(
    () => Array.from(document.querySelectorAll('#jupyter-hvd-sidebar .jp-HvdPool button[data-action="restart"]')).every(b => !b.disabled),
    null,
    { timeout: 15000 }
  );
  await shot('5-restarted');

  // The command palette's Interrupt acts on the current notebook's pool. The cell first says the restart asked for
  // from the sidebar (the notebook's record of it).
  await runCell(page, 1);
  await second.locator('.jp-OutputArea-output', { hasText: 'restarted from the sidebar' }).waitFor({ timeout: 30000 });
  await page.waitForFunction(
    () => document.querySelector('#jupyter-hvd-sidebar .jp-HvdPool')?.dataset.state === 'running',
    null,
    { timeout: 15000 }
  );
  await second.locator('.jp-OutputArea-output', { hasText: 'step 2' }).waitFor({ timeout: 30000 });
  await page.keyboard.press('Control+Shift+c');
  await page.locator('.lm-CommandPalette-input').fill('Interrupt jupyter-hvd pool');
  await page.keyboard.press('Enter');
  await second.locator('.jp-OutputArea-output', { hasText: 'Interrupted' }).waitFor({ timeout: 30000 });
  await page.waitForFunction(
    () => document.querySelector('#jupyter-hvd-sidebar .jp-HvdPool')?.dataset.state === 'idle',
    null,
    { timeout: 15000 }
  );

  // Stop: it destroys worker state, so it asks first; after "Stop" the pool disappears.
  const stopAt = Date.now();
  await poolBox.locator('button[data-action="stop"]').click();
  await dialog().locator("text=Lost: everything in the ranks' namespaces").waitFor({ timeout: 5000 });
  await shot('6-stop-confirmation');
  await dialog().locator('button.jp-mod-warn').click();
  await sidebar.locator('text=No jupyter-hvd pool is running').waitFor({ timeout: 30000 });
  timings.pool_gone_after_stop_s = (Date.now() - stopAt) / 1000;
  await shot('7-stopped');

  // About one request a second while visible; none while the panel is collapsed.
  let requests = 0;
  page.on('request', r => {
    if (r.url().includes('/jupyter-hvd/pools')) {
      requests++;
    }
  });
  await page.waitForTimeout(3000);
  timings.requests_in_3s_visible = requests;
  await page.locator('.jp-SideBar [data-id="jupyter-hvd-sidebar"]').click();
  await sidebar.waitFor({ state: 'hidden', timeout: 5000 });
  requests = 0;
  await page.waitForTimeout(3000);
  timings.requests_in_3s_hidden = requests;
  await page.locator('.jp-SideBar [data-id="jupyter-hvd-sidebar"]').click();
  await sidebar.waitFor({ state: 'visible', timeout: 5000 });
  if (timings.requests_in_3s_visible < 2 || timings.requests_in_3s_hidden !== 0) {
    throw new Error(`polling: ${timings.requests_in_3s_visible} requests visible, ${timings.requests_in_3s_hidden} hidden`);
  }

  // The panel is part of the layout: after a reload it is open again, without a click.
  await page.waitForTimeout(1500); // the layout is saved shortly after a change
  await page.goto(NOTEBOOK_URL); // no &reset this time
  await sidebar.locator('text=No jupyter-hvd pool is running').waitFor({ timeout: 60000 });
  timings.total_s = (Date.now() - t0) / 1000;
});
