import fs from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

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
