// How late a line printed on rank 0 becomes text in JupyterLab's page (started by tests/test_ui_latency.py),
// headless Chromium on the same host and clock. The notebook's cells: start a pool; choose the text view; a
// ticker that prints its wall-clock time on rank 0 every 250 ms; choose the widget view; the ticker again; stop.
// A MutationObserver stamps each "LAT <seconds>" the first time it is in the DOM; late = that time - the stamp.
// Prints one JSON line: result.text and result.widget are lists of milliseconds.
//
// Env: LAB_URL (http://127.0.0.1:PORT/), TOKEN, NOTEBOOK (path under the server root), ARTIFACTS, CHROMIUM.
import { finish, openPage, runCell as runCellOn } from "./notebook_page.mjs";

const { LAB_URL, TOKEN, NOTEBOOK, ARTIFACTS = "artifacts/print_latency" } = process.env;
const session = await openPage(ARTIFACTS);
const { page, result, shot } = session;
let failure;
const runCell = (index) => runCellOn(page, index);

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
  const cell = await runCell(index);
  const prompt = cell.locator(".jp-InputPrompt");
  const t0 = Date.now();
  while (((await prompt.textContent()) || "").includes("*") && Date.now() - t0 < 120000) {
    await page.waitForTimeout(250);
  }
  return page.evaluate(() => {
    window.__observer.disconnect();
    return Array.from(window.__seen, ([stamp, t]) => t - Number(stamp) * 1000);
  });
}

try {
  await page.goto(`${LAB_URL}lab/tree/${NOTEBOOK}?token=${TOKEN}&reset`);
  await page.locator(".jp-Notebook .jp-Cell").first().waitFor({ timeout: 60000 });
  await page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').waitFor({ timeout: 60000 });
  const kernelDialog = page.locator(".jp-Dialog", { hasText: "Select Kernel" });
  if (await kernelDialog.waitFor({ timeout: 3000 }).then(() => true, () => false)) {
    await kernelDialog.locator("button", { hasText: "Select" }).click();
  }
  const first = await runCell(0);
  await first.locator(".jp-OutputArea-output", { hasText: "Pool ready" }).waitFor({ timeout: 150000 });
  await runCell(1);
  result.text = await measure(2);
  await runCell(3);
  result.widget = await measure(4);
  await shot("done");
  const stop = await runCell(5);
  await stop.locator(".jp-OutputArea-output", { hasText: "Pool stopped" }).waitFor({ timeout: 60000 });
  result.ok = true;
} catch (e) {
  failure = e;
} finally {
  await finish(session, ARTIFACTS, failure);
}
