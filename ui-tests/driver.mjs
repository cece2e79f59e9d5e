// The one browser driver of the UI tests (tests/test_ui_*.py, tests/test_sidebar_*.py, scripts/check_wheel.sh):
// Debian's Chromium through playwright-core, a page that records its errors, a notebook opened and its cells run
// the way a user does, screenshots in an artifacts folder, and the check's result printed as one JSON line (the
// pytest side reads the last line that starts with "{", see tests/lab.py run_browser()).
//
// JupyterLab and Notebook 7 draw notebooks with the same widgets: the same cell, prompt and output classes and the
// same command-mode keys, so one set of helpers serves both.
import { chromium } from "playwright-core";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export const CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"];

/**
 * Run `check({ page, result, shot })` in a fresh headless Chromium page, then report.
 * `result` starts as { ok: false, errors: [] } (page errors and console errors are added as they happen); the
 * check adds what it measured, and `ok` becomes true when it returns. On a failure the error, the notebook's
 * outputs and a screenshot are kept. The result goes to `artifacts`/result.json and to stdout as one JSON line;
 * the exit code is 0 only when ok.
 */
export async function runCheck({ artifacts, viewport = { width: 1300, height: 1000 } }, check) {
  mkdirSync(artifacts, { recursive: true });
  const result = { ok: false, errors: [] };
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: CHROMIUM_ARGS,
  });
  const page = await browser.newPage({ viewport });
  page.on("pageerror", (e) => result.errors.push(e.message));
  page.on("console", (m) => m.type() === "error" && result.errors.push(m.text()));
  // Which resources failed (a console error says "404" without the address).
  result.failed_requests = [];
  page.on("response", (r) => r.status() >= 400 && result.failed_requests.push(`${r.status()} ${r.url()}`));
  const shot = (name) => page.screenshot({ path: join(artifacts, `${name}.png`) });
  try {
    await check({ page, result, shot });
    result.ok = true;
  } catch (failure) {
    result.error = String(failure && failure.stack ? failure.stack : failure);
    result.outputs = await page
      .locator(".jp-Notebook .jp-Cell .jp-OutputArea")
      .allTextContents()
      .catch(() => []);
    await shot("error").catch(() => {});
  } finally {
    await browser.close();
  }
  writeFileSync(join(artifacts, "result.json"), JSON.stringify(result, null, 1));
  console.log(JSON.stringify(result));
  process.exitCode = result.ok ? 0 : 1;
}

/** Open the notebook at `url` (token included) and wait until its kernel is idle. */
export async function openNotebook(page, url) {
  await page.goto(url);
  await page.locator(".jp-Notebook .jp-Cell").first().waitFor({ timeout: 60000 });
  // JupyterLab sometimes asks which kernel to start although the notebook names one: accept its choice.
  const kernelDialog = page.locator(".jp-Dialog", { hasText: "Select Kernel" });
  if (await kernelDialog.waitFor({ timeout: 3000 }).then(() => true, () => false)) {
    await kernelDialog.locator("button", { hasText: "Select" }).click();
  }
  await waitForKernel(page);
}

/**
 * Wait until the notebook page shows its kernel idle: connected to the kernel it runs on. A cell run before that
 * (right after a reload, say) makes JupyterLab and Notebook 7 start a new kernel in place of the running one.
 */
export async function waitForKernel(page) {
  await page.locator(".jp-Notebook .jp-Cell").first().waitFor({ timeout: 60000 });
  // The toolbar names the kernel once the page is connected to it; the status indicator says "idle" before that.
  const named = () =>
    Array.from(document.querySelectorAll(".jp-KernelName"))
      .filter((e) => e.offsetParent !== null)
      .some((e) => !["", "No Kernel"].includes(e.textContent.trim()));
  await page.waitForFunction(named, null, { timeout: 60000 });
  await page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').waitFor({ timeout: 60000 });
}

/** Run cell `index` (Ctrl+Enter in command mode) and return its locator once its prompt shows it was queued. */
export async function runCell(page, index) {
  const cell = page.locator(".jp-Notebook .jp-Cell").nth(index);
  const prompt = cell.locator(".jp-InputPrompt");
  const before = (await prompt.textContent()) || "";
  // A key press can land before the editor has focus: press again until the prompt changes to [*] or [n].
  for (let attempt = 0; attempt < 5; attempt++) {
    await cell.locator(".jp-InputArea-editor").click();
    await page.keyboard.press("Escape");
    await page.keyboard.press("Control+Enter");
    for (let i = 0; i < 20; i++) {
      const now = (await prompt.textContent()) || "";
      if (now !== before && /\[(\*|\d+)\]/.test(now)) return cell;
      await page.waitForTimeout(150);
    }
  }
  throw new Error(`cell ${index} did not start`);
}

/** Whether cell `cell` (a locator) is still running: its prompt shows [*]. */
export async function isRunning(cell) {
  return ((await cell.locator(".jp-InputPrompt").textContent()) || "").includes("*");
}

/**
 * Wait until `cell` (a locator) has finished: its prompt no longer shows [*], and its live view, if it has one, no
 * longer says it runs. The page draws the view's last update in an animation frame, a moment after the prompt
 * changes; a view still "running" seconds after its cell ended is what a user would see as wrong.
 */
export async function finished(page, cell, timeout = 120000) {
  const t0 = Date.now();
  while (await isRunning(cell)) {
    if (Date.now() - t0 > timeout) throw new Error(`a cell ran longer than ${timeout / 1000} s`);
    await page.waitForTimeout(200);
  }
  const running = cell.locator('.jhvd-live[data-state="running"]');
  for (const t1 = Date.now(); (await running.count()) > 0; await page.waitForTimeout(100)) {
    if (Date.now() - t1 > 10000) throw new Error("a cell ended but its live view still says it runs after 10 s");
  }
}

/** Wait until `cell`'s output shows `text`. */
export async function waitForOutput(cell, text, timeout = 60000) {
  await cell.locator(".jp-OutputArea-output", { hasText: text }).waitFor({ timeout });
}

/**
 * Show JupyterLab's jupyter-hvd sidebar. JupyterLab restores its saved layout after the tabs appear, and the
 * restore shows the panel it remembers: click once the splash screen is gone, and only on a tab that is not the
 * current one (a click on the current tab closes its panel).
 */
export async function showSidebar(page) {
  const tab = page.locator('.jp-SideBar [data-id="jupyter-hvd-sidebar"]');
  await tab.waitFor({ timeout: 60000 });
  await page.locator("#jupyterlab-splash").waitFor({ state: "detached", timeout: 60000 });
  if (!(await tab.evaluate((t) => t.classList.contains("lm-mod-current")))) await tab.click();
  await page.locator("#jupyter-hvd-sidebar").waitFor({ state: "visible", timeout: 15000 });
}
