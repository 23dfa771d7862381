import { expectStatus } from './expect.js';
import type { Client } from './server.js';
import { multipart } from './zip.js';

/** What `POST /api/v1/import` and `GET /api/v1/import/:id` answer (docs/api.md "Import"). */
export interface ImportJob {
  id: string;
  status: 'queued' | 'running' | 'done' | 'failed';
  space: string;
  total: number;
  done: number;
  created: number;
  updated: number;
  unchanged: number;
  skipped: { path: string; reason: string }[];
  skipped_count: number;
  renamed: { path: string; imported_as: string }[];
  renamed_count: number;
  commits: string[];
  error: string | null;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  status_url: string;
}

const enc = encodeURIComponent;

/** A raw zip upload; `space` null leaves the query out. */
export const postZip = (c: Client, space: string | null, zip: Buffer, opts: { type?: string; headers?: Record<string, string> } = {}) =>
  c.request<ImportJob>('POST', `/api/v1/import${space === null ? '' : `?space=${enc(space)}`}`, {
    body: zip,
    headers: { 'content-type': opts.type ?? 'application/zip', ...opts.headers },
  });

/** A multipart upload: text fields and at most one file (field `file` unless named). */
export const postMultipart = (c: Client, fields: Record<string, string>, file?: { data: Buffer; field?: string; name?: string; type?: string }) => {
  const mp = multipart(
    fields,
    file ? { field: file.field ?? 'file', name: file.name ?? 'export.zip', data: file.data, ...(file.type ? { type: file.type } : {}) } : undefined,
  );
  return c.request<ImportJob>('POST', '/api/v1/import', { body: mp.body, headers: { 'content-type': mp.contentType } });
};

/** The JSON form. */
export const postJson = (c: Client, space: string, files: { path: string; content: string }[], headers?: Record<string, string>) =>
  c.post<ImportJob>('/api/v1/import', { space, files }, headers);

/** Polls `status_url` as a client would until the job ends. */
export async function finished(c: Client, job: ImportJob, ms = 120_000): Promise<ImportJob> {
  const until = Date.now() + ms;
  let cur = job;
  while (cur.status !== 'done' && cur.status !== 'failed') {
    if (Date.now() > until) throw new Error(`import ${job.id} did not finish: ${JSON.stringify(cur).slice(0, 400)}`);
    await new Promise((r) => setTimeout(r, 50));
    const res = await c.get<ImportJob>(cur.status_url);
    expectStatus(res, 200);
    cur = res.body;
  }
  return cur;
}

/** Skipped files by path → reason. */
export const reasons = (job: ImportJob) => Object.fromEntries(job.skipped.map((s) => [s.path, s.reason]));
