// The live training view in a real browser: JupyterLab (started by tests/test_ui_live_view.py), headless
// Chromium. Runs %hvd_start -np 2 and a training cell with a tqdm bar; samples the plot's point count while
// the cell runs, checks the bar stays one line, hovers and zooms the plot, reloads the page, stops the pool.
// Prints one JSON line of what it saw; screenshots go to $ARTIFACTS.
//
// Env: NOTEBOOK_URL (JupyterLab's URL of the notebook, token included), ARTIFACTS, CHROMIUM.
import { isRunning, openNotebook, runCell, runCheck, waitForKernel, waitForOutput } from "./driver.mjs";

const { NOTEBOOK_URL, ARTIFACTS = "artifacts/live_view" } = process.env;

await runCheck({ artifacts: ARTIFACTS }, async ({ page, result, shot }) => {
  await openNotebook(page, `${NOTEBOOK_URL}&reset`);
  await waitForOutput(await runCell(page, 0), "Pool ready", 150000);

  const train = await runCell(page, 1);
  await train.locator(".jhvd-live").waitFor({ timeout: 30000 });
  // Sample while the cell runs: the plot's points, the bar elements, the finished lines that look like a bar.
  result.samples = [];
  const t0 = Date.now();
  for (;;) {
    const running = await isRunning(train);
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
  // Hover readout and drag-to-zoom on the plot (uPlot's overlay takes the pointer events).
  const over = train.locator(".jhvd-plot .u-over");
  const box = await over.boundingBox();
  // The step under the pointer at a tenth of the plot's width: about step 30 of 0-299, or inside the zoomed range.
  const stepAtTenth = async () => {
    await page.mouse.move(box.x + box.width * 0.1, box.y + box.height * 0.5);
    return (await train.locator(".jhvd-readout").textContent()) || "";
  };
  result.readoutAtTenth = await stepAtTenth();
  await page.mouse.move(box.x + box.width * 0.5, box.y + box.height * 0.5);
  result.readout = await train.locator(".jhvd-readout").textContent();
  await page.mouse.move(box.x + box.width * 0.3, box.y + box.height * 0.5);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.6, box.y + box.height * 0.5, { steps: 5 });
  await page.mouse.up();
  await page.mouse.move(box.x + box.width * 0.45, box.y + box.height * 0.5);
  result.zoomedReadout = await train.locator(".jhvd-readout").textContent();
  result.zoomedTitle = await train.locator(".jhvd-plot-title").textContent();
  result.zoomedReadoutAtTenth = await stepAtTenth();
  await shot("2-done-zoomed");
  await over.dblclick();
  result.resetTitle = await train.locator(".jhvd-plot-title").textContent();
  result.resetReadoutAtTenth = await stepAtTenth();
  result.final = await train.evaluate((cell) => ({
    points: Number(cell.querySelector(".jhvd-plot")?.dataset.points || 0),
    status: cell.querySelector(".jhvd-status")?.textContent || "",
    lines: Array.from(cell.querySelectorAll(".jhvd-log-lines .jhvd-line")).map((l) => l.textContent),
    coloured: cell.querySelectorAll(".jhvd-log-lines .jhvd-line span[style*='color']").length,
    staticCopies: cell.querySelectorAll(".jhvd-static").length,
    legend: cell.querySelector(".jhvd-legend")?.textContent || "",
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

  await waitForKernel(page);
  await waitForOutput(await runCell(page, 2), "Pool stopped");
});
