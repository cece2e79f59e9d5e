// What both browser checks of the live view share: headless Chromium with a page that records its errors, and
// running one notebook cell the way a user does (JupyterLab and Notebook 7 draw notebooks with the same widget:
// the same cell, prompt and output classes, the same command-mode keys).
import { chromium } from "playwright-core";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** Chromium and one page; `result.errors` collects page errors and console errors, `shot(name)` saves a PNG. */
export async function openPage(artifacts) {
  mkdirSync(artifacts, { recursive: true });
  const result = { ok: false, samples: [], errors: [] };
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
  });
  const page = await browser.newPage({ viewport: { width: 1300, height: 1000 } });
  page.on("pageerror", (e) => result.errors.push(e.message));
  page.on("console", (m) => m.type() === "error" && result.errors.push(m.text()));
  const shot = (name) => page.screenshot({ path: join(artifacts, `${name}.png`) });
  return { browser, page, result, shot };
}

/** Run cell `index` (Ctrl+Enter in command mode) and return its locator once its prompt shows it ran. */
export async function runCell(page, index) {
  const cell = page.locator(".jp-Notebook .jp-Cell").nth(index);
  const prompt = cell.locator(".jp-InputPrompt");
  // A key press can land before the editor has focus: press again until the prompt shows the cell ran.
  for (let attempt = 0; attempt < 5; attempt++) {
    await cell.locator(".jp-InputArea-editor").click();
    await page.keyboard.press("Escape");
    await page.keyboard.press("Control+Enter");
    for (let i = 0; i < 20; i++) {
      if (/\[(\*|\d+)\]/.test((await prompt.textContent()) || "")) return cell;
      await page.waitForTimeout(250);
    }
  }
  throw new Error(`cell ${index} did not start`);
}

/** After the check: on failure keep the error, the cells' outputs and a screenshot; close Chromium; write
 * result.json beside the screenshots and print the result as one JSON line (the pytest side reads it). */
export async function finish({ browser, page, result, shot }, artifacts, failure) {
  if (failure !== undefined) {
    result.error = String(failure && failure.stack ? failure.stack : failure);
    result.outputs = await page
      .locator(".jp-Notebook .jp-Cell .jp-OutputArea")
      .allTextContents()
      .catch(() => []);
    await shot("error").catch(() => {});
  }
  await browser.close();
  writeFileSync(join(artifacts, "result.json"), JSON.stringify(result, null, 1));
  console.log(JSON.stringify(result));
}
