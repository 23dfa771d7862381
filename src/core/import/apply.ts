import type { Transaction } from 'kysely';
import { canReadPage, decideWrite } from '../../policy/pages.js';
import type { Principal } from '../../policy/principal.js';
import { chunkBody, type Chunk } from '../../retrieval/chunking.js';
import { indexPages } from '../../retrieval/indexer.js';
import { ObjectStore } from '../../store/git/object-store.js';
import type { TreeEntry } from '../../store/git/codec.js';
import type { DB, PagesTable } from '../../store/schema.js';
import { appendAuditMany } from '../audit.js';
import type { CoreContext } from '../context.js';
import { conflict, ServiceError } from '../errors.js';
import { parsePagePath, type PagePath } from '../paths.js';
import { commitFiles, MAIN_REF } from '../pages/commit.js';
import { analyzeContent, type PageContent } from '../pages/content.js';
import { facts, pageAudit, pageRow, rowFacts, supersedeOwnConflicts, versionRow, type RecordedChange } from '../pages/persist.js';
import { ensureFolders, ensureSpace } from '../spaces.js';
import { deliverWatchEvents } from '../watches.js';
import type { ImportFile, SkippedFile } from './entries.js';

/** What one batch of an import did. */
export interface BatchOutcome {
  created: number;
  updated: number;
  unchanged: number;
  skipped: SkippedFile[];
  commit: string | null;
}

/** Engines bound a statement's parameters: rows per multi-row statement. */
const ROWS = 400;

function slices<T>(values: readonly T[], size = ROWS): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < values.length; i += size) out.push(values.slice(i, i + size));
  return out;
}

interface Judged {
  file: ImportFile;
  target: PagePath;
  content: PageContent;
  chunks: Chunk[];
  existing: PagesTable | null;
}

const FOLDER_MODE = '40000';

/**
 * Git holds a file or a folder at a path, never both: `x.md` and `x.md/y.md` cannot both be
 * pages (a REST create answers 409 for the second). Such files are skipped, not the batch: what
 * the workspace's tree holds wins, then the file that comes first. Answers why, by page path.
 */
async function fileFolderClashes(trx: Transaction<DB>, workspaceId: string, paths: readonly string[]): Promise<Map<string, string>> {
  const objects = new ObjectStore(trx, workspaceId);
  const head = await objects.getRef(MAIN_REF);
  const root = head ? ((await objects.getCommit(head))?.tree ?? null) : null;
  const listings = new Map<string, Map<string, TreeEntry>>();
  const entries = new Map<string, TreeEntry | null>();
  /** The tree's entry at a path (null: nothing there). */
  const entry = async (path: string): Promise<TreeEntry | null> => {
    const known = entries.get(path);
    if (known !== undefined) return known;
    const slash = path.lastIndexOf('/');
    const parent = slash < 0 ? root : await entry(path.slice(0, slash)).then((e) => (e?.mode === FOLDER_MODE ? e.sha : null));
    let found: TreeEntry | null = null;
    if (parent) {
      let listing = listings.get(parent);
      if (!listing) listings.set(parent, (listing = new Map(((await objects.getTree(parent)) ?? []).map((e) => [e.name, e]))));
      found = listing.get(path.slice(slash + 1)) ?? null;
    }
    entries.set(path, found);
    return found;
  };
  const files = new Set<string>();
  const folders = new Set<string>();
  const out = new Map<string, string>();
  for (const path of paths) {
    const segments = path.split('/');
    const prefixes = segments.slice(0, -1).map((_, i) => segments.slice(0, i + 1).join('/'));
    let clash: string | null = null;
    if (folders.has(path)) clash = `${path} is a folder of other files of this import, not a file`;
    else if ((await entry(path))?.mode === FOLDER_MODE) clash = `${path} is a folder, not a file`;
    for (const prefix of prefixes) {
      if (clash) break;
      if (files.has(prefix)) clash = `${prefix} is a file of this import, not a folder`;
      else {
        const e = await entry(prefix);
        if (e && e.mode !== FOLDER_MODE) clash = `${prefix} is a file, not a folder`;
      }
    }
    if (clash) out.set(path, clash);
    else {
      files.add(path);
      for (const prefix of prefixes) folders.add(prefix);
    }
  }
  return out;
}

/**
 * One batch of an import as one commit, in the caller's transaction: each file is judged like
 * any write (its content parsed and checked, decideWrite against what it replaces), then the
 * commit, page rows, index rows, versions and audit entries are written in multi-row statements.
 * A page with the same content is left alone; a file that may not be written is skipped and
 * reported. What a single write does (recordPageChange) is done here for many pages at once,
 * with the same row builders.
 */
export async function applyImportBatch(
  ctx: CoreContext,
  trx: Transaction<DB>,
  p: Principal,
  job: { id: string; space: string },
  files: readonly ImportFile[],
  at: Date,
): Promise<BatchOutcome> {
  const out: BatchOutcome = { created: 0, updated: 0, unchanged: 0, skipped: [], commit: null };
  const existing = new Map<string, PagesTable>();
  for (const paths of slices(files.map((f) => f.path))) {
    const rows = await trx
      .selectFrom('pages')
      .selectAll()
      .where('workspace_id', '=', p.workspaceId)
      .where('deleted_at', 'is', null)
      .where('path', 'in', paths)
      .execute();
    for (const r of rows) existing.set(r.path, r);
  }
  const writes: Judged[] = [];
  for (const file of files) {
    try {
      const target = parsePagePath(file.path);
      const before = existing.get(file.path) ?? null;
      // A page the importer cannot read is, to it, only a taken path: said as a REST create
      // says it (409 already_exists), never with its level, and never compared with the file.
      if (before && !canReadPage(p, rowFacts(before))) throw conflict(`A page already exists at ${file.path}`, 'already_exists');
      const content = analyzeContent(file.content, target.slug);
      // Cut now, while the parse of this body is the one the markdown module keeps.
      const chunks = chunkBody(content.body);
      const decision = decideWrite(p, before ? rowFacts(before) : null, facts(file.path, content));
      if (decision.kind === 'deny') throw decision.error;
      if (before && before.content === file.content) out.unchanged++;
      else writes.push({ file, target, content, chunks, existing: before });
    } catch (e) {
      if (!(e instanceof ServiceError)) throw e;
      out.skipped.push({ path: file.path, reason: e.message });
    }
  }
  const clashes = await fileFolderClashes(
    trx,
    p.workspaceId,
    writes.map((w) => w.file.path),
  );
  if (clashes.size > 0) {
    for (const [path, reason] of clashes) out.skipped.push({ path, reason });
    writes.splice(0, writes.length, ...writes.filter((w) => !clashes.has(w.file.path)));
  }
  if (writes.length === 0) return out;

  const message = `Import ${writes.length} file${writes.length === 1 ? '' : 's'} into ${job.space} (import ${job.id})`;
  const commit = await commitFiles(
    trx,
    p.workspaceId,
    p,
    writes.map((w) => ({ path: w.file.path, content: w.file.content })),
    message,
    at,
  );
  out.commit = commit.sha;
  const now = at.toISOString();
  await ensureSpace(trx, p.workspaceId, job.space, now);
  for (const folder of new Set(writes.map((w) => w.target.folderPath))) await ensureFolders(trx, p.workspaceId, folder, now);

  const chunked = new Map<string, Chunk[]>();
  const changes = writes.map((w): { change: RecordedChange; row: PagesTable } => {
    const change: RecordedChange = {
      action: w.existing ? 'update' : 'create',
      existing: w.existing,
      target: w.target,
      content: w.content,
      message,
      commit,
      blobSha: commit.blobs.get(w.file.path) ?? null,
      at,
    };
    const row = pageRow(p, change);
    chunked.set(row.id, w.chunks);
    return { change, row };
  });
  for (const batch of slices(changes.filter((c) => !c.change.existing)))
    await trx
      .insertInto('pages')
      .values(batch.map((c) => c.row))
      .execute();
  for (const { change, row } of changes) {
    if (!change.existing) continue;
    const { id, ...rest } = row;
    await trx.updateTable('pages').set(rest).where('id', '=', id).execute();
  }
  const rows = changes.map((c) => c.row);
  await indexPages(trx, rows, chunked);
  await supersedeOwnConflicts(
    trx,
    p,
    changes.filter((c) => c.change.existing).map((c) => c.row.id),
    commit.sha,
    now,
  );
  for (const batch of slices(changes))
    await trx
      .insertInto('page_versions')
      .values(batch.map((c) => versionRow(p, c.row, c.change)))
      .execute();
  await appendAuditMany(
    trx,
    p.workspaceId,
    [
      ...changes.map((c) => pageAudit(p, c.row, c.change)),
      { principalId: p.id, action: 'import.batch', detail: { import: job.id, space: job.space, commit: commit.sha, files: writes.length } },
    ],
    at,
  );
  // Watchers are told page by page, as for any write; a workspace without watches skips the look.
  const watched = await trx.selectFrom('watches').select('id').where('workspace_id', '=', p.workspaceId).limit(1).executeTakeFirst();
  if (watched) {
    for (const { change, row } of changes) {
      await deliverWatchEvents(ctx, trx, p.workspaceId, { action: change.action, row, before: change.existing, actor: p, author: undefined, at });
    }
  }
  out.created = changes.filter((c) => !c.change.existing).length;
  out.updated = changes.length - out.created;
  return out;
}
