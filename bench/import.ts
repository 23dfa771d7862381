/**
 * Import (issue 16, "Speed"): a zip of N (10,000) files of real markdown, uploaded raw to
 * `POST /api/v1/import` of a service started as a child process (SQLite under a temp dir, or
 * PostgreSQL when BENCH_DATABASE_URL is set), timed from the upload's first byte until the job
 * reports done and a keyword search finds the last file's own word. Reports pages per second
 * to searchable and the service's peak RSS (VmHWM of its process group).
 *
 * The corpus is the markdown that ships in node_modules (READMEs, changelogs, docs: real text
 * with headings, lists, code and links, 0.1–64 KB), cycled to N files under distinct paths,
 * each made unique by a last line carrying its own word. A second corpus of note-sized pages
 * (the same files cut at their second heading, at most 4 KB) is timed the same way, since notes
 * are what a team imports most.
 *
 * Standalone: `tsx bench/import.ts [--quick]`.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, signupHuman } from '../test/support/server.js';
import { buildZip } from '../test/support/zip.js';
import { installCleanupHandlers, log, makeTempDir, peakRssOfGroup, removeTempDir, round, ROOT, runStandalone, SERVICE_ENV, startChild } from './util.js';

const ENV = { ...SERVICE_ENV, RATE_LIMITS: 'off' };

/** Markdown files under node_modules, read once, in a stable order. */
function realMarkdown(): string[] {
  const out = execFileSync('find', [path.join(ROOT, 'node_modules'), '-name', '*.md', '-size', '-64k', '-type', 'f'], { encoding: 'utf8' });
  const texts: string[] = [];
  for (const f of out.split('\n').filter(Boolean).sort()) {
    const t = fs.readFileSync(f, 'utf8');
    if (t.trim() && !t.includes('\u0000')) texts.push(t);
  }
  return texts;
}

/** A note-sized cut of a document: up to its second heading, at most 4 KB, on a line end. */
function noteOf(text: string): string {
  const headings = [...text.matchAll(/^#{1,3} /gm)].map((m) => m.index);
  let end = headings[2] ?? text.length;
  end = Math.min(end, 4096);
  const cut = text.slice(0, end);
  return cut.slice(0, Math.max(cut.lastIndexOf('\n'), Math.min(cut.length, 200)));
}

function corpus(texts: string[], n: number): { files: { name: string; data: string }[]; bytes: number; lastWord: string } {
  const files: { name: string; data: string }[] = [];
  let bytes = 0;
  for (let i = 0; i < n; i++) {
    const data = `${texts[i % texts.length]!.trimEnd()}\n\nImported copy ${i}: benchword${i}.\n`;
    bytes += Buffer.byteLength(data);
    files.push({ name: `set-${Math.floor(i / texts.length)}/folder-${i % 50}/doc-${i}.md`, data });
  }
  return { files, bytes, lastWord: `benchword${n - 1}` };
}

async function timeImport(client: Client, space: string, zip: Buffer, lastWord: string, pgid: number | undefined) {
  const t0 = performance.now();
  const res = await client.request('POST', `/api/v1/import?space=${space}`, { body: zip, headers: { 'content-type': 'application/zip' } });
  if (res.status !== 202 && res.status !== 200) throw new Error(`import answered ${res.status}: ${res.text.slice(0, 300)}`);
  const accepted = performance.now();
  let job = res.body as { id: string; status: string; done: number; total: number; created: number; skipped_count: number; error: string | null };
  let rssPeak = peakRssOfGroup(pgid) ?? 0;
  while (job.status !== 'done' && job.status !== 'failed') {
    await new Promise((r) => setTimeout(r, 100));
    rssPeak = Math.max(rssPeak, peakRssOfGroup(pgid) ?? 0);
    job = (await client.get(`/api/v1/import/${job.id}`)).body;
  }
  if (job.status !== 'done') throw new Error(`import failed: ${job.error}`);
  const done = performance.now();
  for (;;) {
    const s = await client.get(`/api/v1/search?q=${lastWord}&mode=fts`);
    if (s.status !== 200) throw new Error(`search answered ${s.status}: ${s.text.slice(0, 200)}`);
    if ((s.body as { results: unknown[] }).results.length > 0) break;
    if (performance.now() - done > 60_000) throw new Error('the last page never became searchable');
    await new Promise((r) => setTimeout(r, 20));
  }
  const searchable = performance.now();
  const seconds = (searchable - t0) / 1000;
  return {
    pages: job.created,
    skipped: job.skipped_count,
    upload_to_accepted_s: round((accepted - t0) / 1000, 3),
    to_searchable_s: round(seconds, 3),
    pages_per_s: round(job.created / seconds, 0),
    service_peak_rss_mb: round((peakRssOfGroup(pgid) ?? rssPeak) / 1024 / 1024, 0),
  };
}

export async function benchImport(opts: { files: number }): Promise<Record<string, unknown>> {
  const texts = realMarkdown();
  log(`import: ${texts.length} markdown files from node_modules, cycled to ${opts.files}`);
  const real = corpus(texts, opts.files);
  const notes = corpus(texts.map(noteOf), opts.files);
  const zips = {
    real: buildZip(real.files),
    notes: buildZip(notes.files),
  };
  const out: Record<string, unknown> = {
    engine: process.env.BENCH_DATABASE_URL ? 'postgres' : 'sqlite',
    files: opts.files,
    corpus_distinct_documents: texts.length,
  };
  for (const kind of ['real', 'notes'] as const) {
    const c = kind === 'real' ? real : notes;
    const dataDir = makeTempDir(`import-${kind}`);
    const env: Record<string, string> = {
      ...ENV,
      DATA_DIR: dataDir,
      ...(process.env.BENCH_DATABASE_URL ? { DATABASE_URL: process.env.BENCH_DATABASE_URL } : {}),
    };
    const svc = await startChild({ name: 'service', script: 'src/main.ts', env, readyPath: '/healthz' });
    try {
      const owner = await signupHuman(svc.url, 'Importer');
      log(`import (${kind}): uploading ${round(zips[kind].length / 1024 / 1024, 1)} MB zip of ${round(c.bytes / 1024 / 1024, 1)} MB markdown`);
      const r = await timeImport(owner.client, `bench-${kind}`, zips[kind], c.lastWord, svc.pgid);
      log(`import (${kind}): ${r.pages} pages searchable in ${r.to_searchable_s} s = ${r.pages_per_s} pages/s, peak RSS ${r.service_peak_rss_mb} MB`);
      out[kind] = {
        zip_mb: round(zips[kind].length / 1024 / 1024, 1),
        markdown_mb: round(c.bytes / 1024 / 1024, 1),
        avg_page_bytes: Math.round(c.bytes / opts.files),
        ...r,
      };
    } finally {
      await svc.stop();
      removeTempDir(dataDir);
    }
  }
  return out;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  installCleanupHandlers();
  const quick = process.argv.includes('--quick');
  runStandalone(() => benchImport({ files: quick ? 2_000 : 10_000 }));
}
