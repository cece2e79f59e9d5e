// What a data scientist sees of a run in the view of a %%hvd cell, in a real JupyterLab or Notebook 7 (started by
// tests/test_ui_run_view.py), headless Chromium at 1440x900, a real 2-rank pool:
//   1. a silent cell: how soon the status line says it runs;
//   2. a training cell that prints prose, a warning and a caught traceback, then its loss (ending at 0.00000) and
//      learning rate: saved mid-run, the saved file read back, a copy opened in a second tab with a kernel of its
//      own; at the end the log's last line, and the log scale with the zeros;
//   3. another training, the page reloaded mid-run: what it shows then, and once the run is over;
//   4. saved, kernel shut down, opened again: the views drawn from the notebook.
// Each step records what it saw and goes on (a step that finds nothing records that), so one run shows every
// problem; tests/test_ui_run_view.py judges. Prints one JSON line; screenshots go to $ARTIFACTS.
//
// Env: NOTEBOOK_URL (token included), APP (lab | notebook), ARTIFACTS, CHROMIUM, GO_DIR (where a training cell looks
// for its file: once the page has seen the run in progress, the run may end at once).
import { writeFileSync } from "node:fs";
import { isRunning, openNotebook, runCell, runCheck, waitForOutput } from "./driver.mjs";

const { NOTEBOOK_URL, APP = "lab", ARTIFACTS = "artifacts/run_view", GO_DIR } = process.env;
/** Lets the training cell `name` run to its end without its steady pace (tests/test_ui_run_view.py cells()). */
const letEnd = (name) => GO_DIR && writeFileSync(`${GO_DIR}/${name}`, "");
const VIEWPORT = { width: 1440, height: 900 };
const MIME = "application/vnd.jupyter-hvd.view+json";
const TRAIN_CELL = 2;
const RELOAD_CELL = 3;

/** What a cell's view shows: status, panels (points, last values, note), log lines and whether the last is in view. */
const look = (cell) =>
  cell.evaluate((el) => {
    const log = el.querySelector(".jhvd-log");
    const lines = Array.from(el.querySelectorAll(".jhvd-log-lines .jhvd-line"));
    const last = lines[lines.length - 1];
    let lastLineVisible = false;
    if (log && last) {
      const box = log.getBoundingClientRect();
      const r = last.getBoundingClientRect();
      lastLineVisible = r.height > 0 && r.top >= box.top - 1 && r.bottom <= box.bottom + 1;
    }
    return {
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
          titleText: p.querySelector(".jhvd-plot-title")?.textContent || "",
          note: p.querySelector(".jhvd-plot-note")?.textContent || "",
        })),
      lines: lines.length,
      lastLine: last?.querySelector(".jhvd-line-text")?.textContent ?? "",
      lastLineVisible,
      text: el.querySelector(".jp-OutputArea")?.innerText || "",
    };
  });

/** The dark pixels of a panel's canvas left of the plot (the y axis' labels) and below it (the x axis'). */
const axisInk = (panel) =>
  panel.evaluate((p) => {
    const canvas = p.querySelector("canvas");
    if (!canvas || !canvas.width) return { left: 0, bottom: 0 };
    const ctx = canvas.getContext("2d");
    const count = (x, y, w, h) => {
      if (w <= 0 || h <= 0) return 0;
      const d = ctx.getImageData(x, y, w, h).data;
      let n = 0;
      for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 128 && d[i] + d[i + 1] + d[i + 2] < 450) n++;
      return n;
    };
    const ratio = canvas.width / canvas.clientWidth || 1;
    const axis = Math.round(50 * ratio);
    return {
      left: count(0, 0, axis, canvas.height - Math.round(30 * ratio)),
      bottom: count(axis, canvas.height - Math.round(28 * ratio), canvas.width - axis, Math.round(28 * ratio)),
    };
  });

/** Whatever `fn` returns, or what went wrong: a step that fails is recorded, and the run goes on. */
async function soft(fn) {
  try {
    return await fn();
  } catch (error) {
    return { failed: String(error).split("\n").slice(0, 8).join("\n") };
  }
}

const pageText = (page) => page.evaluate(() => document.body.innerText);

await runCheck({ artifacts: ARTIFACTS, viewport: VIEWPORT }, async ({ page, result, shot }) => {
  const origin = new URL(NOTEBOOK_URL);
  const token = origin.searchParams.get("token");
  const name = decodeURIComponent(origin.pathname.split("/").pop());
  const api = (path) => `${origin.origin}/api/${path}?token=${token}`;
  const pageOf = (notebook) =>
    APP === "lab"
      ? `${origin.origin}/lab/workspaces/copy/tree/${notebook}?token=${token}&reset`
      : `${origin.origin}/notebooks/${notebook}?token=${token}`;

  await openNotebook(page, APP === "lab" ? `${NOTEBOOK_URL}&reset` : NOTEBOOK_URL);
  await waitForOutput(await runCell(page, 0), "Pool ready", 150000);

  // 1. A silent cell: the status line within a second of the key press, its elapsed time counting.
  const t0 = Date.now();
  let cell = await runCell(page, 1);
  result.silent = await soft(async () => {
    await page.waitForFunction((el) => /running/.test(el.querySelector(".jhvd-status")?.textContent || ""), await cell.elementHandle(), {
      timeout: 15000,
      polling: 50,
    });
    const firstElapsed = Number(await cell.locator(".jhvd-status").getAttribute("data-elapsed"));
    return { statusAfterMs: Date.now() - t0, status: (await look(cell)).status, firstElapsed };
  });
  await page.waitForTimeout(2100);
  result.silentLater = (await look(cell)).status; // its elapsed time counts while nothing comes
  await cell.scrollIntoViewIfNeeded();
  await shot(`${APP}-1-silent-cell`);
  while (await isRunning(cell)) await page.waitForTimeout(250);

  // 2. Training, saved mid-run.
  cell = await runCell(page, TRAIN_CELL);
  result.beforeSave = await soft(async () => {
    await page.waitForFunction(
      (el) => Number(el.querySelector('.jhvd-plot[data-panel="loss"]')?.dataset.points || 0) >= 60,
      await cell.elementHandle(),
      { timeout: 90000 },
    );
    return look(cell);
  });
  await cell.scrollIntoViewIfNeeded();
  await shot(`${APP}-2-running`);
  await page.keyboard.press("Escape");
  await page.keyboard.press("Control+s");
  await page.waitForTimeout(2000);
  result.runningAtSave = await isRunning(cell);
  // The file as saved: what a reader without the kernel gets.
  const saved = await (await page.request.get(api(`contents/${name}`))).json();
  const outputs = saved.content.cells[TRAIN_CELL].outputs;
  const view = outputs.map((o) => o.data?.[MIME]).find(Boolean);
  result.savedMidRun = {
    mimes: outputs.map((o) => Object.keys(o.data || {}).sort()),
    points: view ? view.curves.reduce((a, c) => a + c.points, 0) : 0,
    logLines: view ? view.log.append.length : 0,
    state: view?.status?.state ?? null,
    html: outputs.some((o) => String(o.data?.["text/html"] || "").includes("data:image/svg+xml")),
  };

  // A copy of the file saved mid-run, opened in a second tab: a kernel of its own, which has no widget of this run.
  result.copyMidRun = await soft(async () => {
    const copy = await (
      await page.request.post(api("contents"), { data: { copy_from: name }, headers: { "Content-Type": "application/json" } })
    ).json();
    const other = await page.context().browser().newPage({ viewport: VIEWPORT });
    try {
      await openNotebook(other, pageOf(copy.path));
      const copied = other.locator(".jp-Notebook .jp-Cell").nth(TRAIN_CELL);
      await copied.scrollIntoViewIfNeeded();
      await other
        .locator(".jp-Notebook .jp-Cell")
        .nth(TRAIN_CELL)
        .locator(".jhvd-live, .jupyter-widgets")
        .first()
        .waitFor({ timeout: 30000 })
        .catch(() => {});
      await other.waitForTimeout(4000); // the widget manager gives up on a model after 2 s
      await other.screenshot({ path: `${ARTIFACTS}/${APP}-3-copy-saved-mid-run.png` });
      return { ...(await look(copied)), page: await pageText(other) };
    } finally {
      await other.close();
      const sessions = await (await page.request.get(api("sessions"))).json();
      for (const s of sessions.filter((s) => s.path === copy.path)) await page.request.delete(api(`sessions/${s.id}`));
    }
  });

  // The end: the log shows its last line.
  letEnd("train");
  cell = page.locator(".jp-Notebook .jp-Cell").nth(TRAIN_CELL);
  for (let i = 0; i < 600 && (await isRunning(cell)); i++) await page.waitForTimeout(250);
  await page
    .waitForFunction((el) => (el.querySelector(".jhvd-live")?.dataset.state || "running") !== "running", await cell.elementHandle(), {
      timeout: 30000,
    })
    .catch(() => {});
  await page.waitForTimeout(1000);
  result.end = await look(cell);
  await cell.locator(".jhvd-log").scrollIntoViewIfNeeded().catch(() => {});
  await shot(`${APP}-4-end-log`);

  // The log scale with zeros in the loss: axes, hover, and a word on what was left out.
  result.logScale = await soft(async () => {
    const panel = cell.locator('.jhvd-plot[data-panel="loss"]');
    await panel.scrollIntoViewIfNeeded();
    const before = await axisInk(panel);
    await cell.locator(".jhvd-toggle").click();
    await page.waitForTimeout(500);
    const after = await axisInk(panel);
    const box = await panel.locator(".u-over").boundingBox();
    await page.mouse.move(box.x + box.width * 0.3, box.y + box.height * 0.5);
    const readout = (await panel.locator(".jhvd-readout").textContent()) || "";
    const seen = (await look(cell)).panels.find((p) => p.title === "loss");
    await shot(`${APP}-5-log-scale`);
    return { before, after, readout, titleText: seen?.titleText ?? "", note: seen?.note ?? "" };
  });
  await cell.locator(".jhvd-toggle").click().catch(() => {});

  // 3. Another run, the page reloaded mid-run. A page gets the outputs of the cells it ran: the reloaded one shows the
  // output as last saved, the copy up to the save, and never an error, during the run or after it.
  const kernelIdle = async () => {
    const sessions = await (await page.request.get(api("sessions"))).json();
    const mine = sessions.find((s) => s.path === name);
    return mine ? (await (await page.request.get(api(`kernels/${mine.kernel.id}`))).json()).execution_state === "idle" : true;
  };
  cell = await runCell(page, RELOAD_CELL);
  result.reloadMidRun = await soft(async () => {
    await page.waitForFunction(
      (el) => Number(el.querySelector('.jhvd-plot[data-panel="loss"]')?.dataset.points || 0) >= 30,
      await cell.elementHandle(),
      { timeout: 90000 },
    );
    await page.keyboard.press("Escape");
    await page.keyboard.press("Control+s");
    await page.waitForTimeout(2000);
    await page.reload();
    const busy = !(await kernelIdle()); // reloaded while the cell runs
    const again = page.locator(".jp-Notebook .jp-Cell").nth(RELOAD_CELL);
    await again.scrollIntoViewIfNeeded();
    await again.locator(".jhvd-live").waitFor({ timeout: 60000 });
    await page.waitForTimeout(4000); // past the grace a copy gives its widget, and the widget manager's 2 s
    const during = { ...(await look(again)), busy, page: await pageText(page) };
    await shot(`${APP}-6-reloaded-mid-run`);
    letEnd("reload");
    for (let i = 0; i < 240 && !(await kernelIdle()); i++) await page.waitForTimeout(250);
    await page.waitForTimeout(4000);
    const after = { ...(await look(again)), page: await pageText(page) };
    await again.scrollIntoViewIfNeeded();
    await shot(`${APP}-7-reloaded-page-after-the-run`);
    return { during, after };
  });

  // 4. Saved, its kernel shut down, opened again.
  await page.keyboard.press("Escape");
  await page.keyboard.press("Control+s");
  await page.waitForTimeout(1500);
  const sessions = await (await page.request.get(api("sessions"))).json();
  for (const s of sessions) await page.request.delete(api(`kernels/${s.kernel.id}`));
  await page.goto("about:blank");
  await openNotebook(page, NOTEBOOK_URL);
  result.reopened = await soft(async () => {
    const again = page.locator(".jp-Notebook .jp-Cell").nth(TRAIN_CELL);
    await again.scrollIntoViewIfNeeded();
    await again.locator(".jhvd-live").waitFor({ timeout: 30000 });
    await page.waitForTimeout(3000);
    await again.locator(".jhvd-log").scrollIntoViewIfNeeded().catch(() => {});
    await shot(`${APP}-8-reopened`);
    const reloaded = page.locator(".jp-Notebook .jp-Cell").nth(RELOAD_CELL);
    return { ...(await look(again)), reloadCell: await look(reloaded), page: await pageText(page) };
  });
});
