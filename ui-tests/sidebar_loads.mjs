// Opens JupyterLab at $LAB_URL and checks that the jupyter-hvd sidebar loaded: its tab is in the left bar, its
// panel lists the pools (or says there are none), and the page raised no error of jupyter-hvd's. Exit code 0 when
// so. Used by scripts/check_wheel.sh against a JupyterLab installed from the wheel alone.
//
// Env: LAB_URL (JupyterLab's URL, token included), ARTIFACTS, CHROMIUM.
import { runCheck, showSidebar } from './driver.mjs';

const { LAB_URL, ARTIFACTS = 'artifacts/sidebar-from-wheel' } = process.env;

await runCheck({ artifacts: ARTIFACTS }, async ({ page, result, shot }) => {
  await page.goto(LAB_URL);
  await showSidebar(page);
  await page
    .locator('#jupyter-hvd-sidebar .jp-HvdSidebar-empty:visible, #jupyter-hvd-sidebar .jp-HvdPool:visible')
    .first()
    .waitFor({ timeout: 15000 });
  await shot('sidebar');
  const own = result.errors.filter(e => /hvd/i.test(e));
  if (own.length) throw new Error(`jupyter-hvd's errors in the page: ${own.join('; ')}`);
});
