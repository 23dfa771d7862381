// Transpiles src/**/*.ts to dist/ (one ES module per file, no bundling) and copies the web app's
// static files beside them, so `npm start` runs plain JavaScript: no TypeScript loader in the
// service process (docs/decisions.md "Issue 19: start without a transpiler"). It takes well
// under a second, so `npm start` runs it every time and dist/ is never stale. Type checking
// stays with `tsc --noEmit` in `npm test`: esbuild only strips types (isolatedModules is on,
// so each file compiles on its own).
import fs from 'node:fs';
import path from 'node:path';
import { build } from 'esbuild';

const root = path.join(import.meta.dirname, '..');
const src = path.join(root, 'src');
const out = path.join(root, 'dist');

/** Every .ts file under dir, and every other file (static assets) separately. */
function walk(dir, ts = [], other = []) {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) walk(p, ts, other);
    else if (e.name.endsWith('.ts') && !e.name.endsWith('.d.ts')) ts.push(p);
    else other.push(p);
  }
  return { ts, other };
}

const started = process.hrtime.bigint();
const { ts, other } = walk(src);
// A fresh tree each time: a file deleted from src/ must not linger in dist/.
fs.rmSync(out, { recursive: true, force: true });
await build({
  entryPoints: ts,
  outdir: out,
  outbase: src,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  bundle: false,
  sourcemap: 'linked',
  logLevel: 'warning',
});
for (const f of other) {
  // Only what the service reads at run time: the web app's assets (the .wat is built into dot-wasm.ts).
  if (!f.startsWith(path.join(src, 'web', 'assets') + path.sep)) continue;
  const to = path.join(out, path.relative(src, f));
  fs.mkdirSync(path.dirname(to), { recursive: true });
  fs.copyFileSync(f, to);
}
const ms = Number(process.hrtime.bigint() - started) / 1e6;
if (process.env.BUILD_QUIET !== '1') console.log(`dist/: ${ts.length} modules in ${ms.toFixed(0)} ms`);
