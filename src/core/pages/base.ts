import { canReadInFull } from '../../policy/pages.js';
import type { Principal } from '../../policy/principal.js';
import type { Executor } from '../../store/db.js';
import { ObjectStore } from '../../store/git/object-store.js';
import type { PagesTable } from '../../store/schema.js';
import { badRequest, type ServiceError } from '../errors.js';

/** A version of a page that a writer or proposer says it started from. */
export interface BaseVersion {
  blobSha: string;
  commitSha: string;
  content: string;
}

/**
 * The version of `page` named by `sha` (a content hash or a commit sha), only when the caller
 * may read that version in full: its own path, page sensitivity and block level within the
 * caller's read ceiling. A redacted version is never a base (its text was hidden from the
 * caller), and an unknown sha, another page's and a hidden version's all answer null alike.
 */
export async function readableBase(db: Executor, p: Principal, page: Pick<PagesTable, 'id' | 'workspace_id'>, sha: string): Promise<BaseVersion | null> {
  const s = sha.trim().toLowerCase();
  if (!/^[0-9a-f]{40}$/.test(s)) return null;
  const v = await db
    .selectFrom('page_versions')
    .select(['blob_sha', 'commit_sha', 'path', 'sensitivity', 'block_level'])
    .where('workspace_id', '=', page.workspace_id)
    .where('page_id', '=', page.id)
    .where((eb) => eb.or([eb('blob_sha', '=', s), eb('commit_sha', '=', s)]))
    .where('blob_sha', 'is not', null)
    .orderBy('commit_seq', 'desc')
    .limit(1)
    .executeTakeFirst();
  if (!v?.blob_sha || !canReadInFull(p, { path: v.path, sensitivity: v.sensitivity, blockLevel: v.block_level })) return null;
  const blob = await new ObjectStore(db, page.workspace_id).getBlob(v.blob_sha);
  if (!blob) return null;
  return { blobSha: v.blob_sha, commitSha: v.commit_sha, content: blob.toString('utf8') };
}

/** 400 invalid_base: one answer whether the sha is unknown, another page's, or a version hidden from the caller. */
export function invalidBase(sha: string): ServiceError {
  const shown = sha.trim().slice(0, 64);
  return badRequest(
    `The base ${shown} is not a version of this page that you can read; read the page again and send its content_hash (ETag) or commit_sha`,
    'invalid_base',
  );
}
