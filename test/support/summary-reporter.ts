import type { Reporter, TestModule } from 'vitest/node';

/**
 * Prints the plain closing line CI reads ("Tests: N passed, N failed, N skipped"),
 * next to vitest's own summary, and the slowest files: CI has a time budget, and this
 * is where to look when it is near.
 */
export default class SummaryReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    let passed = 0;
    let failed = 0;
    let skipped = 0;
    for (const m of testModules) {
      for (const t of m.children.allTests()) {
        const state = t.result().state;
        if (state === 'passed') passed++;
        else if (state === 'failed') failed++;
        else skipped++;
      }
      // A file that failed to load has no tests but must count as a failure.
      if (m.state() === 'failed' && [...m.children.allTests()].length === 0) failed++;
    }
    const slowest = testModules
      .map((m) => ({ file: m.relativeModuleId, seconds: m.diagnostic().duration / 1000 }))
      .sort((a, b) => b.seconds - a.seconds)
      .slice(0, 15);
    process.stdout.write('\nSlowest files (seconds of tests and hooks):\n');
    for (const s of slowest) process.stdout.write(`  ${s.seconds.toFixed(1).padStart(7)}  ${s.file}\n`);
    process.stdout.write(`\nTests: ${passed} passed, ${failed} failed, ${skipped} skipped\n`);
  }
}
