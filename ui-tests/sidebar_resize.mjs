// Restart at another number of ranks from the sidebar, in a real JupyterLab (started by tests/test_sidebar_resize.py)
// with headless Chromium at 1440x900 and a real 2-rank CPU pool that keeps a model and its optimizer: the Restart
// dialog's size field (prefilled, refusing what is not a number of ranks), a restart at 3 ranks (the pool then shows
// 3 rank rows; the next cell sees 3 ranks with the kept weights and the learning rate scaled to the size), and a size
// the host cannot run (refused with the reason; the pool keeps its 3 ranks). Prints one JSON line of what it saw
// (tests/test_sidebar_resize.py judges it); screenshots go to $ARTIFACTS.
//
// Env: NOTEBOOK_URL (JupyterLab's URL of the notebook, token included), TOO_MANY (a number of ranks this host cannot
// run), ARTIFACTS, CHROMIUM.
import { finished, openNotebook, runCell, runCheck, showSidebar } from './driver.mjs';

const { NOTEBOOK_URL, TOO_MANY = '999', ARTIFACTS = 'artifacts/sidebar-resize' } = process.env;

/** The pool as the sidebar shows it: id, state, figures line, rank rows (their pids), notes, warnings, what is kept. */
const poolShown = () => {
  const boxes = document.querySelectorAll('#jupyter-hvd-sidebar .jp-HvdPool');
  const box = boxes[0];
  if (!box) return null;
  const rows = Array.from(box.querySelectorAll('tr.jp-HvdRank'));
  return {
    pools: boxes.length,
    id: box.dataset.poolId,
    state: box.dataset.state,
    meta: box.querySelector('.jp-HvdPool-meta')?.textContent ?? '',
    cell: box.querySelector('.jp-HvdPool-cell')?.textContent ?? null,
    ranks: rows.map((r) => Number(r.dataset.rank)),
    pids: rows.map((r) => Number(r.dataset.pid)),
    notes: Array.from(box.querySelectorAll('.jp-HvdPool-note')).map((n) => n.textContent),
    warnings: Array.from(box.querySelectorAll('.jp-HvdPool-warning')).map((n) => n.textContent),
    kept: box.querySelector('.jp-HvdPool-kept')?.textContent ?? '',
    restartEnabled: !box.querySelector('button[data-action="restart"]')?.disabled
  };
};

/** The open dialog: title, paragraphs, its size field and what it says, its buttons, and how it is laid out. */
const dialogShown = () => {
  const dialog = document.querySelector('.jp-Dialog');
  if (!dialog) return null;
  const body = dialog.querySelector('.jp-Dialog-body');
  const content = dialog.querySelector('.jp-Dialog-content');
  const input = body.querySelector('input');
  const label = input?.closest('label');
  const accept = dialog.querySelector('button.jp-mod-accept');
  const rect = (node) => {
    if (!node) return null;
    const r = node.getBoundingClientRect();
    return { left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width, height: r.height };
  };
  // The label's words alone (the label holds the field too).
  const words = label && document.createRange();
  if (words) words.selectNodeContents(label.firstChild);
  return {
    title: dialog.querySelector('.jp-Dialog-header')?.textContent?.trim() ?? '',
    lines: Array.from(body.querySelectorAll('p')).map((p) => p.textContent),
    label: label ? label.textContent.trim() : null,
    hint: body.querySelector('.jp-HvdConfirm-sizeHint')?.textContent ?? null,
    problem: body.querySelector('.jp-HvdConfirm-sizeProblem')?.textContent ?? null,
    input: input && {
      value: input.value,
      type: input.type,
      min: input.min,
      focused: document.activeElement === input,
      invalid: input.matches(':invalid'),
      ariaInvalid: input.getAttribute('aria-invalid'),
      border: getComputedStyle(input).borderTopColor
    },
    accept: accept && {
      text: accept.textContent.trim(),
      disabled: accept.disabled,
      title: accept.title,
      opacity: getComputedStyle(accept).opacity,
      cursor: getComputedStyle(accept).cursor
    },
    layout: {
      viewport: { width: innerWidth, height: innerHeight },
      content: rect(content),
      body: rect(body),
      bodyScroll: body && { scrollWidth: body.scrollWidth, clientWidth: body.clientWidth, scrollHeight: body.scrollHeight, clientHeight: body.clientHeight },
      input: rect(input),
      labelWords: words ? rect(words) : null,
      hint: rect(body.querySelector('.jp-HvdConfirm-sizeHint')),
      paragraphs: Array.from(body.querySelectorAll('p')).map(rect),
      buttons: Array.from(dialog.querySelectorAll('.jp-Dialog-footer button')).map(rect)
    }
  };
};

/** The text of cell `index`'s outputs. */
const outputOf = (page, index) => page.locator('.jp-Notebook .jp-Cell').nth(index).locator('.jp-OutputArea').innerText();

await runCheck({ artifacts: ARTIFACTS, viewport: { width: 1440, height: 900 } }, async ({ page, result, shot }) => {
  const poolBox = page.locator('#jupyter-hvd-sidebar .jp-HvdPool').first();
  const shown = () => page.evaluate(poolShown);
  const dialog = () => page.evaluate(dialogShown);
  const field = page.locator('.jp-Dialog .jp-Dialog-body input');
  // The dialog alone at the screen's pixels, beside the whole window's shot: where a cut word or a field off its line
  // shows.
  const shotWithDialog = async (name) => {
    await shot(name);
    await page.locator('.jp-Dialog-content').screenshot({ path: `${ARTIFACTS}/${name}-dialog.png` });
  };
  const sample = () =>
    page.evaluate(`(() => {
      window.__hvdShown = ${poolShown.toString()};
      const seen = (window.__hvdSamples = []);
      window.__hvdSampler = setInterval(() => seen.push({ t: Date.now(), pool: window.__hvdShown() }), 100);
    })()`);
  const samples = () =>
    page.evaluate(() => {
      clearInterval(window.__hvdSampler);
      const all = window.__hvdSamples;
      // Each change once, with when it came (ms after the first sample).
      return all
        .filter((s, i) => i === 0 || JSON.stringify(s.pool) !== JSON.stringify(all[i - 1].pool))
        .map((s) => ({ ms: s.t - all[0].t, ...s.pool, notes: s.pool?.notes.map((n) => n.replace(/\(asked .*\)/, '(asked …)')) }));
    });

  await openNotebook(page, `${NOTEBOOK_URL}&reset`);
  await showSidebar(page);

  // A 2-rank pool, a setup cell (model and an optimizer whose learning rate scales with the size), both kept (which
  // writes a snapshot at once), a training cell (its end writes the next one: the trained weights come back).
  const snapshotsShown = () => {
    const kept = document.querySelector('#jupyter-hvd-sidebar .jp-HvdPool-kept')?.textContent ?? '';
    return Number(/Kept: model, opt · (\d+)\u00a0snapshots?/.exec(kept)?.[1] ?? 0);
  };
  const snapshotsAtLeast = (n) =>
    page.waitForFunction(`(${snapshotsShown.toString()})() >= ${n}`, null, { timeout: 30000 });
  for (const i of [0, 1, 2]) {
    await finished(page, await runCell(page, i), 180000);
  }
  await snapshotsAtLeast(1);
  const kept = await page.evaluate(snapshotsShown);
  await finished(page, await runCell(page, 3), 180000);
  result.trainingOutput = await outputOf(page, 3);
  await snapshotsAtLeast(kept + 1);
  await page.waitForFunction(() => document.querySelector('#jupyter-hvd-sidebar .jp-HvdPool')?.dataset.state === 'idle', null, { timeout: 30000 });
  result.before = await shown();
  await shot('1-two-ranks-trained');

  // The Restart dialog: its size field, prefilled with the pool's size and focused.
  await poolBox.locator('button[data-action="restart"]').click();
  await page.locator('.jp-Dialog').waitFor({ timeout: 5000 });
  await page.waitForTimeout(300); // the dialog's focus lands
  result.dialogAsked = await dialog();
  await shotWithDialog('2-restart-question');

  // What is not a number of ranks: Restart disabled with the reason; Enter does not restart; the text stays.
  result.invalid = [];
  for (const text of ['', '0', '2.5']) {
    await field.fill(text);
    result.invalid.push({ text, ...(await dialog()) });
    if (text === '') await shotWithDialog('3-no-size');
    if (text === '2.5') await shotWithDialog('4-not-a-whole-number');
  }
  await field.press('Enter');
  await page.waitForTimeout(300);
  result.afterEnterOnInvalid = await dialog();

  // 3 ranks: the dialog says what another size does; Restart sends it.
  await field.fill('3');
  result.dialogAtThree = await dialog();
  await shotWithDialog('5-restart-at-3');
  await sample();
  await page.locator('.jp-Dialog button.jp-mod-accept').click();
  await page.waitForTimeout(300);
  result.restarting = await shown();
  await shot('6-restarting-at-3');
  const oldPids = result.before.pids;
  // Restarted: new engines only, idle, nothing pending; how many of them is judged after (a restart at the old size
  // then fails at once, with what was shown, instead of waiting here for 3 rows that never come).
  const restarted = (old) => {
    const box = document.querySelector('#jupyter-hvd-sidebar .jp-HvdPool');
    const pids = Array.from(box?.querySelectorAll('tr.jp-HvdRank') ?? []).map((r) => Number(r.dataset.pid));
    return pids.length > 0 && pids.every((p) => !old.includes(p)) && box.dataset.state === 'idle' && !box.querySelector('.jp-HvdPool-pending');
  };
  for (let settled = false; !settled; ) {
    await page.waitForFunction(restarted, oldPids, { timeout: 180000 });
    await page.waitForTimeout(1500); // idle for good, not between the replay and the restore
    settled = await page.evaluate(restarted, oldPids);
  }
  result.duringRestart = await samples();
  result.after = await shown();
  await shot('7-three-ranks');

  // The next cell, on every rank: 3 ranks, the kept weights on each, the learning rate for 3 ranks.
  const check = await runCell(page, 4);
  await finished(page, check, 180000);
  result.checkOutput = await outputOf(page, 4);
  await shot('8-next-cell-on-three-ranks');

  // A size this host cannot run: refused with the reason, the 3 ranks run on.
  await page.waitForFunction(() => document.querySelector('#jupyter-hvd-sidebar .jp-HvdPool')?.dataset.state === 'idle', null, { timeout: 30000 });
  result.beforeTooMany = await shown();
  await poolBox.locator('button[data-action="restart"]').click();
  await page.locator('.jp-Dialog').waitFor({ timeout: 5000 });
  await field.fill(TOO_MANY);
  result.dialogTooMany = await dialog();
  await shotWithDialog('9-restart-at-too-many');
  await sample();
  await page.locator('.jp-Dialog button.jp-mod-accept').click();
  await page.waitForTimeout(300);
  result.askedTooMany = await shown();
  await shot('10-asked-too-many');
  // Answered: nothing pending, and the reason shown, or (wrongly) other engines; the test judges which.
  await page.waitForFunction(
    (old) => {
      const box = document.querySelector('#jupyter-hvd-sidebar .jp-HvdPool');
      const pids = Array.from(box?.querySelectorAll('tr.jp-HvdRank') ?? []).map((r) => Number(r.dataset.pid));
      const why = Array.from(box?.querySelectorAll('.jp-HvdPool-warning') ?? []).some((w) => /restart/.test(w.textContent));
      return box && !box.querySelector('.jp-HvdPool-pending') && (why || (pids.length > 0 && !pids.some((p) => old.includes(p))));
    },
    result.beforeTooMany.pids,
    { timeout: 180000 }
  );
  await page.waitForTimeout(1500);
  result.duringRefusal = await samples();
  result.refused = await shown();
  await shot('11-refused');
  // What the refusal left under the cell that ran last (the kernel's log goes there between cells): no traceback.
  result.refusedUnderLastCell = await outputOf(page, 4);
  const next = await runCell(page, 5);
  await finished(page, next, 180000);
  result.afterRefusalOutput = await outputOf(page, 5);
  result.afterRefusal = await shown();
  await shot('12-next-cell-after-refusal');
});
