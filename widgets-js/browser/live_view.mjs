// The live training view in a real browser: JupyterLab (started by tests/test_ui_live_view.py), headless
// Chromium. Runs %hvd_start -np 2 and a training cell with a tqdm bar; samples the plot's point count while
// the cell runs, checks the bar stays one line, hovers and zooms the plot, stops the pool.
// Prints one JSON line of what it saw; screenshots go to $ARTIFACTS.
//
// Env: LAB_URL (http://127.0.0.1:PORT/), TOKEN, NOTEBOOK (path under the server root), ARTIFACTS, CHROMIUM.
import { finish, openPage, runCell as runCellOn } from "./notebook_page.mjs";

const { LAB_URL, TOKEN, NOTEBOOK, ARTIFACTS = "artifacts/live_view" } = process.env;
const session = await openPage(ARTIFACTS);
const { page, result, shot } = session;
let failure;
const runCell = (index) => runCellOn(page, index);

try {
  await page.goto(`${LAB_URL}lab/tree/${NOTEBOOK}?token=${TOKEN}&reset`);
  await page.locator(".jp-Notebook .jp-Cell").first().waitFor({ timeout: 60000 });
  await page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').waitFor({ timeout: 60000 });

  // JupyterLab sometimes asks which kernel to start although the notebook names one: accept its choice.
  const kernelDialog = page.locator(".jp-Dialog", { hasText: "Select Kernel" });
  if (await kernelDialog.waitFor({ timeout: 3000 }).then(() => true, () => false)) {
    await kernelDialog.locator("button", { hasText: "Select" }).click();
  }
  const first = await runCell(0);
  await first.locator(".jp-OutputArea-output", { hasText: "Pool ready" }).waitFor({ timeout: 150000 });

  const train = await runCell(1);
  const live = train.locator(".jhvd-live");
  await live.waitFor({ timeout: 30000 });
  const prompt = train.locator(".jp-InputPrompt");
  // Sample while the cell runs: the plot's points, the bar elements, the finished lines that look like a bar.
  const t0 = Date.now();
  for (;;) {
    const running = ((await prompt.textContent()) || "").includes("*");
    const sample = await train.evaluate((cell) => ({
      points: Number(cell.querySelector(".jhvd-plot")?.dataset.points || 0),
      bars: cell.querySelectorAll(".jhvd-partial").length,
      barLines: Array.from(cell.querySelectorAll(".jhvd-log-lines .jhvd-line")).filter((l) =>
        /it\/s|s\/it/.test(l.textContent),
      ).length,
      status: cell.querySelector(".jhvd-status")?.textContent || "",
    }));
    result.samples.push({ t: (Date.now() - t0) / 1000, running, ...sample });
    if (running && sample.points > 100 && !result.runningShot) {
      await shot("1-running");
      result.runningShot = true;
    }
    if (!running || Date.now() - t0 > 120000) break;
    await page.waitForTimeout(250);
  }
  await page.waitForFunction((cell) => cell.querySelector(".jhvd-live")?.dataset.state === "done", await train.elementHandle(), {
    timeout: 30000,
  });
  // Hover readout and drag-to-zoom on the plot.
  const canvas = train.locator(".jhvd-plot canvas");
  const box = await canvas.boundingBox();
  await page.mouse.move(box.x + box.width * 0.5, box.y + box.height * 0.5);
  result.readout = await train.locator(".jhvd-readout").textContent();
  await page.mouse.move(box.x + box.width * 0.3, box.y + box.height * 0.5);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.6, box.y + box.height * 0.5, { steps: 5 });
  await page.mouse.up();
  await page.mouse.move(box.x + box.width * 0.45, box.y + box.height * 0.5);
  result.zoomedReadout = await train.locator(".jhvd-readout").textContent();
  await shot("2-done-zoomed");
  await canvas.dblclick();
  result.final = await train.evaluate((cell) => ({
    points: Number(cell.querySelector(".jhvd-plot")?.dataset.points || 0),
    status: cell.querySelector(".jhvd-status")?.textContent || "",
    lines: Array.from(cell.querySelectorAll(".jhvd-log-lines .jhvd-line")).map((l) => l.textContent),
    coloured: cell.querySelectorAll(".jhvd-log-lines .jhvd-line span[style*='color']").length,
    staticCopies: cell.querySelectorAll(".jhvd-static").length,
  }));
  result.staticVisible = await train.locator(".jhvd-static").isVisible();
  await shot("3-done");

  // A reloaded page: the widget comes back from the kernel and asks it for everything once.
  await page.keyboard.press("Control+s");
  await page.waitForTimeout(1000);
  await page.reload();
  const again = page.locator(".jp-Notebook .jp-Cell").nth(1);
  await page.waitForFunction(
    (cell) => Number(cell.querySelector(".jhvd-plot")?.dataset.points || 0) === 300,
    await again.elementHandle({ timeout: 60000 }),
    { timeout: 60000 },
  );
  result.afterReload = await again.evaluate((cell) => ({
    points: Number(cell.querySelector(".jhvd-plot")?.dataset.points || 0),
    lines: cell.querySelectorAll(".jhvd-log-lines .jhvd-line").length,
    status: cell.querySelector(".jhvd-status")?.textContent || "",
  }));
  result.staticVisibleAfterReload = await again.locator(".jhvd-static").isVisible();
  await shot("4-after-reload");

  const stop = await runCell(2);
  await stop.locator(".jp-OutputArea-output", { hasText: "Pool stopped" }).waitFor({ timeout: 60000 });
  result.ok = true;
} catch (e) {
  failure = e;
} finally {
  await finish(session, ARTIFACTS, failure);
}
