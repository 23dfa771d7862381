import type { Principal } from '../../policy/principal.js';
import type { CoreContext } from '../context.js';
import { decideImport } from '../../policy/import.js';
import { enforce } from '../../policy/pages.js';
import { badRequest } from '../errors.js';
import { parseSpaceId } from '../paths.js';
import { StagingList, type SkippedFile } from './entries.js';
import { acceptImport, importRunner, type ImportJob } from './jobs.js';
import { IMPORT_LIMITS } from './limits.js';
import { readZip } from './zip.js';

export { IMPORT_LIMITS } from './limits.js';
export { getImport, importQueue, importRunner, type ImportJob } from './jobs.js';
export { ImportJsonBody, ImportParams, ImportQuery } from './input.js';

/** An upload in one of the spec's forms (a folder on the operator's disk comes as `files`, its bytes unchecked). */
export type ImportUpload =
  { kind: 'zip'; space: string; data: Buffer } | { kind: 'files'; space: string; files: { path: string; content: string | Buffer }[]; skipped?: SkippedFile[] };

/**
 * Imports an upload (POST /api/v1/import, and the operator's command line): reads it, stores
 * it as a job, and runs the job. One batch or less is applied before answering (`finished`);
 * a larger import answers at once and runs in the background (`finished: false`, poll its id).
 */
export async function startImport(ctx: CoreContext, p: Principal, upload: ImportUpload): Promise<{ job: ImportJob; finished: boolean }> {
  const job = await acceptUpload(ctx, p, upload);
  const runner = importRunner(ctx);
  if (job.total <= IMPORT_LIMITS.batchFiles) {
    const done = await runner.run(job.id, p);
    if (done) return { job: done, finished: true };
    return { job, finished: false };
  }
  runner.kick();
  return { job, finished: false };
}

/** Reads an upload and stores it as a queued job (nothing is applied yet). */
export async function acceptUpload(ctx: CoreContext, p: Principal, upload: ImportUpload): Promise<ImportJob> {
  if (!upload.space) throw badRequest('Name the Space to import into (field or query parameter space)', 'invalid_request');
  // Who may import and where, before the upload is unpacked.
  const space = parseSpaceId(upload.space);
  enforce(decideImport(p, space));
  let staged;
  if (upload.kind === 'zip') {
    staged = await readZip(upload.data, space);
  } else {
    staged = new StagingList(space);
    for (const s of upload.skipped ?? []) staged.skip(s.path, s.reason);
    for (const f of upload.files) {
      const path = staged.admit(f.path);
      if (path !== null) staged.add(f.path, path, f.content);
    }
  }
  return acceptImport(ctx, p, space, staged);
}
