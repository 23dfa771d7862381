import { execFileSync } from 'node:child_process';

export const VERSION = '0.1.0';

/** The deployed commit: GIT_SHA from the environment, else asked of git once, else "unknown". */
export const GIT_SHA: string = (() => {
  if (process.env.GIT_SHA) return process.env.GIT_SHA;
  try {
    return execFileSync('git', ['rev-parse', 'HEAD'], { stdio: ['ignore', 'pipe', 'ignore'], timeout: 2000 })
      .toString()
      .trim();
  } catch {
    return 'unknown';
  }
})();
