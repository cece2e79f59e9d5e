// How late a line printed on rank 0 becomes text in JupyterLab's page (started by tests/test_ui_latency.py),
// headless Chromium on the same host and clock. The notebook's cells: start a pool; choose the text view; a
// ticker that prints its wall-clock time on rank 0 every 250 ms; choose the widget view; the ticker again; stop.
// A MutationObserver stamps each "LAT <seconds>" the first time it is in the DOM; late = that time - the stamp.
// Prints one JSON line: result.text and result.widget are lists of milliseconds.
//
// Env: NOTEBOOK_URL (JupyterLab's URL of the notebook, token included), ARTIFACTS, CHROMIUM.
import { isRunning, openNotebook, runCell, runCheck, waitForOutput } from "./driver.mjs";

const { NOTEBOOK_URL, ARTIFACTS = "artifacts/print_latency" } = process.env;

await runCheck({ artifacts: ARTIFACTS }, async ({ page, result, shot }) => {
  /** Run the ticker cell `index` and return how late each of its stamps appeared in the page (ms). */
  async function measure(index) {
    await page.evaluate((index) => {
      window.__seen = new Map();
      window.__observer?.disconnect();
      window.__observer = new MutationObserver(() => {
        const now = performance.timeOrigin + performance.now();
        const area = document.querySelectorAll(".jp-Notebook .jp-Cell")[index]?.querySelector(".jp-OutputArea");
        for (const m of (area?.textContent || "").matchAll(/LAT (\d+\.\d+)/g)) {
          if (!window.__seen.has(m[1])) window.__seen.set(m[1], now);
        }
      });
      window.__observer.observe(document.body, { childList: true, subtree: true, characterData: true });
    }, index);
    const cell = await runCell(page, index);
    const t0 = Date.now();
    while ((await isRunning(cell)) && Date.now() - t0 < 120000) await page.waitForTimeout(250);
    return page.evaluate(() => {
      window.__observer.disconnect();
      return Array.from(window.__seen, ([stamp, t]) => t - Number(stamp) * 1000);
    });
  }

  await openNotebook(page, `${NOTEBOOK_URL}&reset`);
  await waitForOutput(await runCell(page, 0), "Pool ready", 150000);
  await runCell(page, 1);
  result.text = await measure(2);
  await runCell(page, 3);
  result.widget = await measure(4);
  await shot("done");
  await waitForOutput(await runCell(page, 5), "Pool stopped");
});
