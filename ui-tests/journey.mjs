// A user's whole journey in a real Jupyter Notebook 7 or JupyterLab (started by tests/test_ui_journey.py), headless
// Chromium at 1440x900, a real 2-rank pool: a setup cell that prints, a kept model, training, Restart from the
// sidebar, the next cell on the restarted pool, a stuck cell stopped with the stop button, a cell that raises on one
// rank, %hvd_debug into that rank's frame, breakpoint() in a cell, %hvd_stop. Each step records what the page shows
// (the pytest side judges it) and takes a screenshot; a step that cannot go on throws.
//
// Env: NOTEBOOK_URL (the notebook's URL, token included), APP ("notebook" or "lab"), ARTIFACTS, CHROMIUM.
import { finished, openNotebook, runCell, runCheck, showSidebar, waitForOutput } from "./driver.mjs";

const { NOTEBOOK_URL, APP = "notebook", ARTIFACTS = "artifacts/journey" } = process.env;

await runCheck({ artifacts: ARTIFACTS, viewport: { width: 1440, height: 900 } }, async ({ page, result, shot }) => {
  const cells = page.locator(".jp-Notebook .jp-Cell");
  const sidebar = page.locator("#jupyter-hvd-sidebar");
  const poolBox = sidebar.locator(".jp-HvdPool").first();

  /** What the user reads under cell `i`: its outputs' text, and which of them are drawn as errors. */
  const outputs = (i) =>
    cells.nth(i).evaluate((el) => ({
      prompt: el.querySelector(".jp-InputPrompt")?.textContent ?? "",
      text: Array.from(el.querySelectorAll(".jp-OutputArea-output")).map((o) => o.textContent).join("\n"),
      errors: Array.from(el.querySelectorAll(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'], .jp-RenderedText[data-mime-type='application/vnd.jupyter.error']")).map((o) => o.textContent),
    }));

  /** Run cell `i` to its end; what it shows. */
  async function run(i, name, timeout = 120000) {
    await finished(page, await runCell(page, i), timeout);
    const seen = await outputs(i);
    await shot(name);
    return seen;
  }

  /** Answer the next input box (pdb's prompt) under cell `i` with `reply`; the prompt it showed. An answered box
   * is marked, as the page may keep it a moment beside the next one. */
  async function answer(i, reply) {
    const next = cells.nth(i).locator(".jp-Stdin-input:not([data-answered])").first();
    await next.waitFor({ timeout: 60000 });
    const box = await next.elementHandle();
    const prompt = await box.evaluate((el) => el.closest(".jp-Stdin")?.querySelector(".jp-Stdin-prompt")?.textContent ?? "");
    await box.fill(reply);
    await box.evaluate((el) => (el.dataset.answered = "1"));
    await box.press("Enter");
    return prompt;
  }

  async function openSidebar() {
    if (APP === "lab") return showSidebar(page);
    await page.locator(".lm-MenuBar-item", { hasText: /^View$/ }).click();
    await page.locator(".lm-Menu-item", { hasText: "Left Sidebar" }).hover();
    await page.locator(".lm-Menu-item", { hasText: "Show Horovod pools (jupyter-hvd)" }).click();
    await sidebar.waitFor({ state: "visible", timeout: 15000 });
  }

  await openNotebook(page, NOTEBOOK_URL);
  await waitForOutput(await runCell(page, 0), "Pool ready", 150000);
  await shot("0-started");
  result.setup = await run(1, "1-setup-printed");
  result.keep = await run(2, "2-kept");
  result.train = await run(3, "3-trained");

  // Restart from the sidebar: the question says what comes back; the pool comes back with new processes.
  await openSidebar();
  await poolBox.locator("tr.jp-HvdRank").first().waitFor({ timeout: 15000 });
  const pids = () => poolBox.locator("tr.jp-HvdRank").evaluateAll((rows) => rows.map((r) => Number(r.dataset.pid)));
  const before = await pids();
  await poolBox.locator('button[data-action="restart"]').click();
  const dialog = page.locator(".jp-Dialog");
  await dialog.waitFor({ timeout: 5000 });
  result.restartDialog = {
    title: ((await dialog.locator(".jp-Dialog-header").textContent()) || "").trim(),
    lines: await dialog.locator(".jp-Dialog-body p").allTextContents(),
  };
  await shot("4-restart-question");
  await dialog.locator("button.jp-mod-accept").click();
  await page.waitForFunction(
    (old) => {
      const box = document.querySelector("#jupyter-hvd-sidebar .jp-HvdPool");
      const now = Array.from(box?.querySelectorAll("tr.jp-HvdRank") ?? []).map((r) => Number(r.dataset.pid));
      return now.length === 2 && now.every((p) => !old.includes(p)) && box.dataset.state === "idle";
    },
    before,
    { timeout: 120000 },
  );
  await shot("5-restarted");
  result.afterRestart = await run(4, "6-after-restart");

  // A stuck cell: rank 0 waits in an allreduce that rank 1 never joins; the stop button (i, i) ends it.
  const stuck = await runCell(page, 5);
  await page.waitForTimeout(6000);
  result.stuckWhileRunning = await outputs(5);
  await shot("7-stuck");
  await stuck.locator(".jp-InputArea-editor").click();
  await page.keyboard.press("Escape");
  await page.keyboard.press("i");
  await page.keyboard.press("i");
  await finished(page, stuck, 60000);
  result.stuck = await outputs(5);
  await shot("8-stopped");

  // A cell that raises on rank 1, then %hvd_debug in that rank's frame.
  const sidebarShows = () =>
    poolBox.evaluate((box) => ({ state: box.dataset.state, cell: box.querySelector(".jp-HvdPool-cell")?.textContent ?? null }));
  await finished(page, await runCell(page, 6));
  result.sidebarAfterError = await sidebarShows(); // at once: the pool file may not say yet that the cell ended
  result.error = await outputs(6);
  await shot("9-error");
  const debug = await runCell(page, 7);
  result.debugPrompts = [await answer(7, "p local_value")];
  await page.waitForTimeout(2500); // two polls of the sidebar: what it shows while the user reads pdb's answer
  result.sidebarDuringDebug = await sidebarShows();
  await shot("10-debug");
  result.debugPrompts.push(await answer(7, "q"));
  await finished(page, debug);
  result.debug = await outputs(7);

  // breakpoint() on rank 1: its prompt in the page, the others wait, `c` lets every rank finish.
  const bp = await runCell(page, 8);
  result.breakpointPrompts = [await answer(8, "p y")];
  await shot("11-breakpoint");
  result.breakpointPrompts.push(await answer(8, "c"));
  await finished(page, bp);
  result.breakpoint = await outputs(8);

  result.stop = await run(9, "12-stopped");
  result.cellTexts = await page.locator(".jp-Notebook .jp-Cell .jp-OutputArea").allTextContents();
});
