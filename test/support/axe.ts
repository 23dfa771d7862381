import fs from 'node:fs';
import { createRequire } from 'node:module';
import type { Page } from 'playwright-core';

/**
 * axe-core (Deque's accessibility rules engine) run inside a playwright page. The app's CSP
 * (`script-src 'self'`) blocks an injected <script> (page.addScriptTag adds an inline one), so
 * the engine's source is evaluated through the DevTools protocol instead (page.evaluate is not
 * subject to the page's CSP): the page under test keeps its real headers.
 */

const AXE_PATH = createRequire(import.meta.url).resolve('axe-core/axe.min.js');
let source: string | undefined;

export interface AxeViolation {
  id: string;
  impact: string | null;
  help: string;
  /** CSS selectors of the offending elements (the first few). */
  targets: string[];
}

/** The violations axe finds on the page as it is now (WCAG 2.x A and AA rules and axe's best practices). */
export async function axeViolations(page: Page): Promise<AxeViolation[]> {
  source ??= fs.readFileSync(AXE_PATH, 'utf8');
  if (!(await page.evaluate(() => 'axe' in window))) await page.evaluate(source);
  return page.evaluate(async () => {
    const axe = (window as unknown as { axe: { run(ctx: Document, opts: unknown): Promise<{ violations: any[] }> } }).axe;
    const r = await axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((v) => ({
      id: v.id as string,
      impact: (v.impact as string | null) ?? null,
      help: v.help as string,
      targets: (v.nodes as { target: unknown[] }[]).slice(0, 5).map((n) => n.target.map(String).join(' ')),
    }));
  });
}

/** The serious and critical violations, each as one readable line (`[]` when there are none). */
export async function seriousViolations(page: Page): Promise<string[]> {
  const all = await axeViolations(page);
  return all.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => `${v.impact} ${v.id}: ${v.help} — at ${v.targets.join(' | ')}`);
}
