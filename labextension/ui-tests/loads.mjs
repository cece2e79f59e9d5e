// Opens JupyterLab at $LAB_URL and checks that the jupyter-hvd sidebar loaded: its tab is in the left bar,
// its panel lists the pools (or says there are none), and the page raised no error. Exit code 0 when so.
import { chromium } from 'playwright-core';

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking']
});
const errors = [];
try {
  const page = await browser.newPage();
  page.on('pageerror', e => errors.push(e.message));
  await page.goto(process.env.LAB_URL);
  await page.locator('.jp-SideBar [data-id="jupyter-hvd-sidebar"]').click({ timeout: 60000 });
  await page.locator('#jupyter-hvd-sidebar .jp-HvdSidebar-empty, #jupyter-hvd-sidebar .jp-HvdPool').first().waitFor({
    timeout: 15000
  });
  if (process.env.SCREENSHOT) {
    await page.screenshot({ path: process.env.SCREENSHOT });
  }
  const own = errors.filter(e => /hvd/i.test(e));
  console.log(JSON.stringify({ ok: own.length === 0, errors }));
  process.exitCode = own.length === 0 ? 0 : 1;
} catch (error) {
  console.log(JSON.stringify({ ok: false, error: String(error), errors }));
  process.exitCode = 1;
} finally {
  await browser.close();
}
