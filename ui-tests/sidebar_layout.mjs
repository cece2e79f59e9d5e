// The sidebar's layout in a real browser: JupyterLab (started by tests/test_sidebar_ui.py, which also wrote a
// pool file with 8 ranks, a straggler, a stalled rank, a NaN loss and a failed thread), headless Chromium, the
// sidebar at its default width. Prints one JSON line of measurements; screenshots go to $ARTIFACTS.
//
// Env: LAB_URL (JupyterLab's URL, token included), RANKS (how many rank rows to wait for), ARTIFACTS, CHROMIUM.
import { runCheck, showSidebar } from './driver.mjs';

const { LAB_URL, RANKS = '8', ARTIFACTS = 'artifacts/sidebar-layout' } = process.env;

/** Measures the rank table as laid out: each rank's figures row (one text line), its last line under it (visible
 * in full inside the sidebar), the text sizes. */
function measure() {
  const side = document.querySelector('#jupyter-hvd-sidebar');
  const box = side.getBoundingClientRect();
  const rows = Array.from(side.querySelectorAll('tr.jp-HvdRank'));
  const rankHeights = rows.map(r => r.getBoundingClientRect().height);
  const lastLines = rows.map(r => {
    const line = r.nextElementSibling?.querySelector('.jp-HvdRank-line');
    if (!line) {
      return null;
    }
    const rect = line.getBoundingClientRect();
    return {
      text: line.textContent,
      inside: rect.width > 0 && rect.left >= box.left - 1 && rect.right <= box.right + 1,
      fontPx: parseFloat(getComputedStyle(line).fontSize)
    };
  });
  // One line of the table's text: a block with the table's font and one character.
  const probe = document.createElement('div');
  const style = getComputedStyle(rows[0].cells[0]);
  Object.assign(probe.style, {
    fontSize: style.fontSize,
    fontFamily: style.fontFamily,
    lineHeight: style.lineHeight,
    position: 'absolute',
    visibility: 'hidden'
  });
  probe.textContent = '0';
  document.body.appendChild(probe);
  const lineHeight = probe.getBoundingClientRect().height;
  probe.remove();
  // Figures cut by an ellipsis (the last column, the output line, may be cut: the tooltip has it all).
  const truncated = [];
  for (const row of rows) {
    for (const cell of Array.from(row.cells)) {
      if (!cell.classList.contains('jp-HvdRank-line') && cell.scrollWidth > cell.clientWidth + 1) {
        truncated.push(`rank ${row.dataset.rank}: ${cell.className} "${cell.textContent}"`);
      }
    }
  }
  const texts = sel => Array.from(side.querySelectorAll(sel)).map(n => n.textContent);
  return {
    sidebarWidth: side.getBoundingClientRect().width,
    horizontalOverflow: side.scrollWidth - side.clientWidth,
    lineHeight,
    rankHeights,
    truncated,
    rowTexts: rows.map(r => Array.from(r.cells).map(c => c.textContent)),
    lastLines,
    figureFontPx: parseFloat(getComputedStyle(rows[0].cells[1]).fontSize),
    headers: texts('table.jp-HvdRanks th'),
    warnings: Array.from(side.querySelectorAll('.jp-HvdPool-warning')).map(w => [w.dataset.kind, w.textContent]),
    stragglers: rows.filter(r => r.dataset.straggler === 'true').map(r => Number(r.dataset.rank)),
    stalledTitle: rows.find(r => r.dataset.state === 'stalled')?.title ?? null
  };
}

await runCheck({ artifacts: ARTIFACTS, viewport: { width: 1440, height: 900 } }, async ({ page, result, shot }) => {
  await page.goto(`${LAB_URL}&reset`);
  await showSidebar(page);
  await page.waitForFunction(
    n => document.querySelectorAll('#jupyter-hvd-sidebar tr.jp-HvdRank').length === n,
    Number(RANKS),
    { timeout: 15000 }
  );
  await page.waitForTimeout(500); // fonts and the panel's size settle
  Object.assign(result, await page.evaluate(measure));
  await shot('lab-8-ranks');
  await page.locator('#jupyter-hvd-sidebar').screenshot({ path: `${ARTIFACTS}/sidebar-8-ranks.png` });
  const own = result.errors.filter(e => /hvd/i.test(e));
  if (own.length) throw new Error(`jupyter-hvd's errors in the page: ${own.join('; ')}`);
});
