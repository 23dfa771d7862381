import fs from 'node:fs';
import path from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';

/** Debian's chromium, driven by playwright-core (.ci/run installs it). */
export const CHROMIUM = '/usr/bin/chromium';

/**
 * Whether the browser tests of `what` can run here. CI must have chromium (a missing one fails
 * the run); elsewhere the tests are skipped with a loud line saying so.
 */
export function chromiumPresent(what: string): boolean {
  if (fs.existsSync(CHROMIUM)) return true;
  if (process.env.CI) throw new Error(`${CHROMIUM} is missing: CI requires Debian's chromium for the browser tests (.ci/run installs it)`);
  console.warn(`\n!!! ${CHROMIUM} not found: the BROWSER tests of ${what} are SKIPPED on this machine (apt-get install chromium) !!!\n`);
  return false;
}

/**
 * Options of a browser suite: a journey of several pages, each with an axe-core pass, takes 10-30 s
 * on a 2-core machine that also runs another test file; the default 30 s budget made them flaky.
 * A hang still fails (Playwright's own waits time out long before this).
 */
export const BROWSER_SUITE = { timeout: 120_000 };

/** A headless chromium without the background traffic a test does not want. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

/** A fresh browser profile on `baseURL`; any JavaScript dialog is recorded (a page must never open one). */
export async function openPage(
  browser: Browser,
  baseURL: string,
  viewport = { width: 1280, height: 900 },
): Promise<{ context: BrowserContext; page: Page; dialogs: string[] }> {
  const context = await browser.newContext({ baseURL, viewport });
  // A missing element fails the test in seconds rather than at the test's own timeout.
  context.setDefaultTimeout(10_000);
  const page = await context.newPage();
  const dialogs: string[] = [];
  page.on('dialog', (d) => {
    dialogs.push(d.message());
    void d.dismiss();
  });
  return { context, page, dialogs };
}

const SCREENSHOTS = path.resolve(import.meta.dirname, '../../docs/screenshots');

/** CV_SCREENSHOTS=1 refreshes docs/screenshots/<name>.png (the README shows them). */
export async function screenshot(page: Page, name: string): Promise<void> {
  if (process.env.CV_SCREENSHOTS !== '1') return;
  fs.mkdirSync(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SCREENSHOTS, `${name}.png`), fullPage: true });
}
