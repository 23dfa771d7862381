// Started by bench/util.ts in its own process group, reading registrations on stdin:
//   +pg <pgid> / -pg <pgid>    a child process group the bench started / has stopped
//   +dir <path> / -dir <path>  a temp dir the bench made / has removed
// When stdin closes (the bench exited, or was killed before it could clean up), it kills the
// groups still registered and removes the dirs still registered, then exits.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';

for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => {});

const groups = new Set();
const dirs = new Set();
const tmpPrefix = path.join(os.tmpdir(), 'cv-bench-');

const rl = readline.createInterface({ input: process.stdin });
rl.on('line', (line) => {
  const sp = line.indexOf(' ');
  if (sp < 0) return;
  const cmd = line.slice(0, sp);
  const arg = line.slice(sp + 1);
  if (cmd === '+pg' || cmd === '-pg') {
    const pg = Number(arg);
    if (!Number.isInteger(pg) || pg <= 1) return;
    if (cmd === '+pg') groups.add(pg);
    else groups.delete(pg);
  } else if (cmd === '+dir' || cmd === '-dir') {
    // Only the bench's own temp dirs, never anything else.
    if (!arg.startsWith(tmpPrefix) || arg.includes('..')) return;
    if (cmd === '+dir') dirs.add(arg);
    else dirs.delete(arg);
  }
});
rl.on('close', () => {
  for (const pg of groups) {
    try {
      process.kill(-pg, 'SIGKILL');
    } catch {
      /* already gone */
    }
  }
  for (const d of dirs) {
    try {
      fs.rmSync(d, { recursive: true, force: true });
    } catch {
      /* best effort */
    }
  }
  process.exit(0);
});
