// The live training view in a real browser: Jupyter Notebook 7 (started by tests/test_ui_notebook7.py),
// headless Chromium. Runs %hvd_start -np 2, opens the jupyter-hvd pools sidebar and finds the pool there and
// its commands in the palette, runs a training cell; samples the plot's point count and the log while the
// cell runs, hovers the finished plot, reloads the page, stops the pool.
// Prints one JSON line of what it saw; screenshots go to $ARTIFACTS. The JupyterLab twin is live_view.mjs.
//
// Env: NOTEBOOK_URL (http://127.0.0.1:PORT/notebooks/NAME?token=...), ARTIFACTS, CHROMIUM.
import { isRunning, openNotebook, runCell, runCheck, waitForKernel, waitForOutput } from "./driver.mjs";

const { NOTEBOOK_URL, ARTIFACTS = "artifacts/live_view_notebook7" } = process.env;

// What a user sees of the view in a cell: plotted points, log lines, status, and the HTML twin if it were rendered.
const look = (cell) =>
  cell.evaluate((el) => ({
    widgets: el.querySelectorAll(".jhvd-live").length,
    state: el.querySelector(".jhvd-live")?.dataset.state || "",
    points: Number(el.querySelector(".jhvd-plot")?.dataset.points || 0),
    canvas: el.querySelectorAll(".jhvd-plot canvas").length,
    lines: Array.from(el.querySelectorAll(".jhvd-log-lines .jhvd-line")).map((l) => l.textContent),
    coloured: el.querySelectorAll(".jhvd-log-lines .jhvd-line span[style*='color']").length,
    status: el.querySelector(".jhvd-status")?.textContent || "",
    staticCopies: el.querySelectorAll(".jhvd-static").length,
  }));

await runCheck({ artifacts: ARTIFACTS }, async ({ page, result, shot }) => {
  // Click through Notebook 7's menu bar: `path` is the menu, then the labels of submenus and the item.
  async function menu(...path) {
    await page.locator(".lm-MenuBar-item", { hasText: new RegExp(`^${path[0]}$`) }).click();
    for (const label of path.slice(1, -1)) await page.locator(".lm-Menu-item", { hasText: label }).hover();
    await page.locator(".lm-Menu-item", { hasText: path[path.length - 1] }).click();
  }

  // The jupyter-hvd pools sidebar (labextension/) in Notebook 7: in the left area, hidden at first; Notebook 7
  // offers it as View > Left Sidebar > "Show <its caption>". Opened, it shows the running pool; the palette
  // lists its Interrupt / Restart / Stop commands. Closed again so the live view below has the page's width.
  async function poolsSidebar() {
    const sidebar = page.locator("#jp-left-stack #jupyter-hvd-sidebar");
    const out = { attached: (await sidebar.count()) === 1, hiddenAtFirst: !(await sidebar.isVisible()) };
    const toggle = () => menu("View", "Left Sidebar", "Show Horovod pools (jupyter-hvd)");
    await toggle();
    await sidebar.locator(".jp-HvdPool").first().waitFor({ timeout: 15000 });
    out.pools = await sidebar.locator(".jp-HvdPool-notebook").allTextContents();
    out.ranks = await sidebar.locator(".jp-HvdPool tr.jp-HvdRank").count();
    await shot("0-sidebar");
    await toggle();
    out.hiddenAfterClose = !(await sidebar.isVisible());
    await menu("View", "Activate Command Palette");
    const search = page.locator(".lm-CommandPalette-input");
    await search.fill("jupyter-hvd pool");
    await page.locator(".lm-CommandPalette-item").first().waitFor({ timeout: 5000 });
    out.palette = (await page.locator(".lm-CommandPalette-itemLabel").allTextContents()).sort();
    await search.press("Escape");
    return out;
  }

  // The id of the kernel the server runs for this notebook (its sessions API): a reload must not replace it.
  async function notebookKernel() {
    const url = new URL(NOTEBOOK_URL);
    const path = decodeURIComponent(url.pathname.replace(/^\/notebooks\//, ""));
    const sessions = await (await fetch(`${url.origin}/api/sessions?token=${url.searchParams.get("token")}`)).json();
    return sessions.filter((s) => s.path === path).map((s) => s.kernel.id);
  }

  await openNotebook(page, NOTEBOOK_URL);
  result.app = await page.evaluate(() => document.title);
  result.notebook7 = await page.evaluate(() => {
    const config = JSON.parse(document.getElementById("jupyter-config-data")?.textContent || "{}");
    return { appName: config.appName || "", appVersion: config.appVersion || "", shell: !!document.querySelector("#main-panel") };
  });

  await waitForOutput(await runCell(page, 0), "Pool ready", 150000);
  result.sidebar = await poolsSidebar();

  const train = await runCell(page, 1);
  await train.locator(".jhvd-live").waitFor({ timeout: 30000 });
  // Sample while the cell runs (the prompt shows [*]): points plotted, log lines shown, the status line.
  result.samples = [];
  const t0 = Date.now();
  for (;;) {
    const running = await isRunning(train);
    const { points, lines, status } = await look(train);
    result.samples.push({ t: (Date.now() - t0) / 1000, running, points, lines: lines.length, status });
    if (running && points > 60 && !result.runningShot) {
      await shot("1-running");
      result.runningShot = true;
    }
    if (!running || Date.now() - t0 > 120000) break;
    await page.waitForTimeout(250);
  }
  await page.waitForFunction((cell) => cell.querySelector(".jhvd-live")?.dataset.state === "done", await train.elementHandle(), {
    timeout: 30000,
  });
  result.final = await look(train);
  result.staticVisible = await train.locator(".jhvd-static").isVisible();
  result.cellText = await train.locator(".jp-OutputArea").innerText();
  // The hover readout on the finished plot (uPlot's overlay takes the pointer events).
  const box = await train.locator(".jhvd-plot .u-over").boundingBox();
  await page.mouse.move(box.x + box.width * 0.5, box.y + box.height * 0.5);
  result.readout = await train.locator(".jhvd-readout").textContent();
  await shot("2-done");

  // A reloaded page: the same kernel (its pool with it), and the widget comes back from it and asks it for
  // everything once.
  result.kernelBeforeReload = await notebookKernel();
  await page.keyboard.press("Escape");
  await page.keyboard.press("Control+s");
  await page.waitForTimeout(1000);
  await page.reload();
  const again = page.locator(".jp-Notebook .jp-Cell").nth(1);
  await page.waitForFunction(
    ([cell, points]) => Number(cell.querySelector(".jhvd-plot")?.dataset.points || 0) === points,
    [await again.elementHandle({ timeout: 60000 }), result.final.points],
    { timeout: 60000 },
  );
  result.afterReload = await look(again);
  result.kernelAfterReload = await notebookKernel();
  result.staticVisibleAfterReload = await again.locator(".jhvd-static").isVisible();
  await shot("3-after-reload");

  await waitForKernel(page);
  await waitForOutput(await runCell(page, 2), "Pool stopped");
});
