import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    reporters: ['default', './test/support/summary-reporter.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Suites start real servers and databases; two workers match the CI machine's cores.
    pool: 'forks',
    maxWorkers: 2,
    // Test files share a worker's module graph: every file imports the whole service, and
    // importing it anew per file was a fifth of the suite's time. Files keep their state in
    // their own servers and databases, never in module globals.
    isolate: false,
  },
});
