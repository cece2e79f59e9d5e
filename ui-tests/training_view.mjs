// A data scientist's session in a real browser, JupyterLab or Notebook 7 (started by tests/test_ui_training_view.py),
// headless Chromium at 1440x900: a short training that prints its epochs, a long noisy one with report(), a tqdm bar
// on every rank with the sidebar open, a new cell (the sidebar forgets the last one's figures), then the notebook is
// saved, its kernel shut down and the notebook opened again. Reads what the plots, the status line, the sidebar and
// the outputs show; prints one JSON line; screenshots go to $ARTIFACTS.
//
// Env: NOTEBOOK_URL (token included), APP (lab | notebook), ARTIFACTS, CHROMIUM.
import { isRunning, openNotebook, runCell, runCheck, showSidebar, waitForOutput } from "./driver.mjs";

const { NOTEBOOK_URL, APP = "lab", ARTIFACTS = "artifacts/training_view" } = process.env;
const VIEWPORT = { width: 1440, height: 900 };

/** What a cell's view shows: per plot panel its points, last raw and smoothed values, x label and ticks. */
const look = (cell) =>
  cell.evaluate((el) => ({
    widgets: el.querySelectorAll(".jupyter-widgets, .widget-output").length,
    views: el.querySelectorAll(".jhvd-live").length,
    state: el.querySelector(".jhvd-live")?.dataset.state || "",
    status: el.querySelector(".jhvd-status")?.textContent || "",
    panels: Array.from(el.querySelectorAll(".jhvd-plot"))
      .filter((p) => p.style.display !== "none")
      .map((p) => ({
        title: p.dataset.panel,
        points: Number(p.dataset.points || 0),
        last: JSON.parse(p.dataset.last || "{}"),
        lastSmoothed: JSON.parse(p.dataset.lastSmoothed || "{}"),
        xLabel: p.dataset.xLabel || "",
        xTicks: (p.dataset.xTicks || "").split(",").filter(Boolean).map(Number),
        titleText: p.querySelector(".jhvd-plot-title")?.textContent || "",
      })),
    lines: Array.from(el.querySelectorAll(".jhvd-log-lines .jhvd-line-text")).map((l) => l.textContent),
    text: el.querySelector(".jp-OutputArea")?.innerText || "",
  }));

/** The sidebar's rank rows: figures by column, the last line under them and whether it can be read in full. */
const sidebarRanks = (page) =>
  page.evaluate(() => {
    const side = document.querySelector("#jupyter-hvd-sidebar");
    if (!side || !side.offsetParent) return null;
    const box = side.getBoundingClientRect();
    const cell = (row, name) => row.querySelector(`.jp-HvdRank-${name}`)?.textContent ?? "";
    return Array.from(side.querySelectorAll("tr.jp-HvdRank")).map((row) => {
      const line = row.nextElementSibling?.querySelector(".jp-HvdRank-line");
      const r = line?.getBoundingClientRect();
      return {
        rank: Number(row.dataset.rank),
        step: cell(row, "step"),
        loss: cell(row, "loss"),
        compute: cell(row, "compute"),
        wait: cell(row, "wait"),
        line: line?.textContent ?? "",
        lineVisible: !!r && r.width > 0 && r.left >= box.left - 1 && r.right <= box.right + 1,
        lineFontPx: line ? parseFloat(getComputedStyle(line).fontSize) : 0,
        figureFontPx: parseFloat(getComputedStyle(row.cells[1]).fontSize),
      };
    });
  });

async function openSidebar(page) {
  if (APP === "lab") {
    await showSidebar(page);
  } else {
    await page.locator(".lm-MenuBar-item", { hasText: /^View$/ }).click();
    await page.locator(".lm-Menu-item", { hasText: "Left Sidebar" }).hover();
    await page.locator(".lm-Menu-item", { hasText: "Show Horovod pools (jupyter-hvd)" }).click();
  }
  await page.locator("#jupyter-hvd-sidebar").waitFor({ state: "visible", timeout: 15000 });
}

/** Run cell `i` to its end; `during(cell)` is called about every 250 ms while it runs. */
async function runToEnd(page, i, during = async () => {}, limit = 180000) {
  const cell = await runCell(page, i);
  const t0 = Date.now();
  while (await isRunning(cell)) {
    if (Date.now() - t0 > limit) throw new Error(`cell ${i} still running after ${limit / 1000} s`);
    await during(cell);
    await page.waitForTimeout(250);
  }
  await page.waitForFunction((el) => el.querySelector(".jhvd-live")?.dataset.state !== "running", await cell.elementHandle(), {
    timeout: 30000,
  });
  await page.waitForTimeout(500); // the finished view replaces the widget
  return cell;
}

await runCheck({ artifacts: ARTIFACTS, viewport: VIEWPORT }, async ({ page, result, shot }) => {
  await openNotebook(page, APP === "lab" ? `${NOTEBOOK_URL}&reset` : NOTEBOOK_URL);
  await waitForOutput(await runCell(page, 0), "Pool ready", 150000);
  await openSidebar(page);

  // 1. A short run that prints its epochs: every point as printed, not smoothed, on an epoch axis.
  let cell = await runToEnd(page, 1);
  await cell.scrollIntoViewIfNeeded();
  result.short = await look(cell);
  await shot(`${APP}-1-short-run`);

  // 2. A long noisy run with report(): smoothed, and the smoothed end close to the raw end; log scale on demand.
  cell = await runToEnd(page, 2);
  await cell.scrollIntoViewIfNeeded();
  result.long = await look(cell);
  await cell.locator(".jhvd-toggle").click();
  await page.waitForTimeout(300);
  result.longLog = (await look(cell)).panels.map((p) => p.titleText);
  await shot(`${APP}-2-long-run-log-scale`);
  await cell.locator(".jhvd-toggle").click();

  // 3. tqdm on every rank, the sidebar open: the plot, the status line and every rank's figures fill as it runs.
  result.tqdmRunning = [];
  result.sidebarRunning = [];
  let shotTaken = false;
  cell = await runToEnd(page, 3, async (c) => {
    const seen = await look(c);
    result.tqdmRunning.push({ status: seen.status, points: seen.panels[0]?.points ?? 0 });
    const ranks = await sidebarRanks(page);
    if (ranks) result.sidebarRunning.push(ranks);
    if (!shotTaken && (seen.panels[0]?.points ?? 0) > 40) {
      shotTaken = true;
      await c.scrollIntoViewIfNeeded();
      await shot(`${APP}-3-tqdm-running`);
    }
  });
  result.tqdm = await look(cell);
  await page.waitForTimeout(1500); // the sidebar's next poll
  result.sidebarAfterTqdm = await sidebarRanks(page);
  await shot(`${APP}-4-tqdm-done`);

  // 4. A new cell: at first it has no figures of its own (the last cell's are gone), then every rank's step.
  result.sidebarNewCell = [];
  cell = await runToEnd(page, 4, async () => {
    const ranks = await sidebarRanks(page);
    if (ranks) result.sidebarNewCell.push(ranks);
  });
  await page.waitForTimeout(1500); // the sidebar's next poll
  result.sidebarAfterNext = await sidebarRanks(page);
  await shot(`${APP}-5-new-cell`);
  // Its ranks' lanes: every rank together, one rank's tab, a search.
  const lines = () =>
    cell.evaluate((el) =>
      Array.from(el.querySelectorAll(".jhvd-log-lines .jhvd-line")).map((l) => [
        l.dataset.rank,
        l.querySelector(".jhvd-line-text").textContent,
      ]),
    );
  result.lanes = { tabs: await cell.locator(".jhvd-tab").allTextContents(), all: await lines() };
  await cell.locator('.jhvd-tab[data-tab="1"]').click();
  result.lanes.rank1 = await lines();
  await cell.locator('.jhvd-tab[data-tab="all"]').click();
  await cell.locator(".jhvd-search").fill("at 40");
  result.lanes.search = await lines();
  await cell.scrollIntoViewIfNeeded();
  await shot(`${APP}-5b-ranks-search`);
  await cell.locator(".jhvd-search").fill("");

  // 5. Saved, kernel shut down, opened again: the finished views are drawn from the notebook, no widget anywhere.
  await page.keyboard.press("Escape");
  await page.keyboard.press("Control+s");
  await page.waitForTimeout(1500);
  const origin = new URL(NOTEBOOK_URL);
  const token = origin.searchParams.get("token");
  const api = (path) => `${origin.origin}/api/${path}?token=${token}`;
  const sessions = await (await page.request.get(api("sessions"))).json();
  for (const s of sessions) await page.request.delete(api(`kernels/${s.kernel.id}`));
  await page.goto("about:blank");
  await openNotebook(page, NOTEBOOK_URL);
  await page.locator(".jhvd-live").first().waitFor({ timeout: 30000 });
  await page.waitForTimeout(1500);
  result.reopened = await page.evaluate(() => ({
    text: document.querySelector(".jp-Notebook")?.innerText || "",
    views: document.querySelectorAll(".jhvd-live").length,
    widgets: document.querySelectorAll(".jp-OutputArea-output .jupyter-widgets").length,
    points: Array.from(document.querySelectorAll(".jhvd-plot"))
      .filter((p) => p.style.display !== "none")
      .map((p) => Number(p.dataset.points || 0)),
  }));
  const cells = page.locator(".jp-Notebook .jp-Cell");
  await cells.nth(2).scrollIntoViewIfNeeded();
  await shot(`${APP}-6-reopened`);
});
