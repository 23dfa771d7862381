import { canReadPage, enforce } from '../policy/pages.js';
import { decideLogAppend } from '../policy/log.js';
import type { Principal } from '../policy/principal.js';
import { inTransaction } from '../store/tx.js';
import type { CoreContext } from './context.js';
import { badRequest, notFound } from './errors.js';
import { analyzeContent } from './pages/content.js';
import { commitPage, rowFacts } from './pages/persist.js';
import { presentPage } from './pages/record.js';
import { listSpaces, spaceVisible } from './spaces.js';
import { hasActionWithin } from '../policy/access.js';
import type { Executor } from '../store/db.js';
import { parseFolderPath, parsePagePath } from './paths.js';

/** Longest log entry, in characters. */
export const MAX_LOG_ENTRY_CHARS = 10_000;

export interface LogAppendResult {
  id: string;
  path: string;
  commit_sha: string;
  /** Absent when the caller may append to the log but not read it. */
  content_hash?: string;
  /** The markdown line(s) appended. */
  appended: string;
}

/** Scopes named in an unknown_scope answer at most. */
const SCOPES_SHOWN = 20;

/**
 * Logging never creates a Space (issue 11): a log goes into a Space that exists and that the
 * caller can see, or a folder inside it (a new folder is fine: it is made as on any write).
 * Otherwise 404 `unknown_scope`, naming the Spaces the caller may log to — never hidden ones.
 */
async function assertScopeExists(ctx: CoreContext, trx: Executor, p: Principal, scope: string): Promise<void> {
  const space = scope.split('/')[0]!;
  const exists = await trx.selectFrom('spaces').select('id').where('workspace_id', '=', p.workspaceId).where('id', '=', space).executeTakeFirst();
  const usable = await loggableSpaces(ctx, trx, p);
  if (exists && usable.includes(space)) return;
  const shown = usable.slice(0, SCOPES_SHOWN);
  const list =
    shown.length === 0
      ? 'none: you may log in no Space'
      : `${shown.join(', ')}${usable.length > shown.length ? `, … (${usable.length - shown.length} more)` : ''}, or a folder inside one`;
  throw notFound(`No Space ${space} to log to; scopes you can use: ${list}`, 'unknown_scope');
}

/**
 * The Spaces the caller may log to: those it holds propose in that exist for it, either by what
 * it reads (listSpaces) or, for a caller that proposes without reading, by what it may propose
 * (spaceVisible over its propose reach: a Space of pages all above that reach stays hidden).
 */
async function loggableSpaces(ctx: CoreContext, trx: Executor, p: Principal): Promise<string[]> {
  const read = new Set((await listSpaces(ctx, p, trx)).map((s) => s.id));
  const all = await trx.selectFrom('spaces').select('id').where('workspace_id', '=', p.workspaceId).orderBy('id').execute();
  const out: string[] = [];
  for (const { id } of all) {
    if (!hasActionWithin(p, 'propose', id)) continue;
    if (read.has(id) || (await spaceVisible(trx, p, id, 'propose'))) out.push(id);
  }
  return out;
}

/** One list item: `- <time> <name> (<id>): <entry>`, further lines indented under it. */
function formatEntry(p: Principal, entry: string, at: string): string {
  const lines = entry.replace(/\r\n?/g, '\n').split('\n');
  const first = `- ${at} ${p.name} (${p.id}): ${lines[0]}`;
  return [first, ...lines.slice(1).map((l) => (l.trim() === '' ? '' : `  ${l}`))].join('\n').replace(/\n+$/, '') + '\n';
}

/**
 * Appends one entry to `<scope>/log.md` (scope: a Space or `space/folder`), creating the log
 * on first use, as one commit (spec: POST /api/v1/log, MCP context_log; grant propose).
 * Entries are plain text: a line opening a `:::` block is refused, so an entry can neither
 * hide nor expose anything by sensitivity.
 */
export async function appendLog(ctx: CoreContext, p: Principal, input: { scope: string; entry: string }): Promise<LogAppendResult> {
  const scope = parseFolderPath(input.scope.replace(/^\/+|\/+$/g, '')).path;
  const entry = input.entry.trim();
  if (entry === '') throw badRequest('The log entry is empty', 'invalid_entry');
  if ([...entry].length > MAX_LOG_ENTRY_CHARS) throw badRequest(`A log entry holds at most ${MAX_LOG_ENTRY_CHARS} characters`, 'invalid_entry');
  // Any line whose text, after quote, list and indentation markup, starts with `:::` could open
  // a block in its container (`> ::: secret` hides every later entry): plain text only.
  if (/^[\s>*+\-\d.)]*:::/m.test(entry)) throw badRequest('A log entry may not open or close a ::: block (in any quote or list)', 'invalid_entry');
  if (entry.includes('\u0000')) throw badRequest('The log entry contains a NUL character', 'invalid_entry');
  const target = parsePagePath(`${scope}/log.md`);
  return inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const existing =
      (await trx
        .selectFrom('pages')
        .selectAll()
        .where('workspace_id', '=', p.workspaceId)
        .where('path', '=', target.path)
        .where('deleted_at', 'is', null)
        .executeTakeFirst()) ?? null;
    if (!existing) await assertScopeExists(ctx, trx, p, scope);
    const facts = { path: target.path, sensitivity: existing?.sensitivity ?? 'internal', blockLevel: null };
    const reads = existing !== null && canReadPage(p, { ...facts, blockLevel: existing.block_level });
    // The propose grant is enough (spec): a caller that may not read the log still appends to it,
    // but a log above its propose reach stays as absent as any hidden page.
    if (existing && !reads && decideLogAppend(p, facts).kind === 'deny') throw notFound(`Log ${target.path} not found`);
    enforce(decideLogAppend(p, facts));
    const at = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
    const appended = formatEntry(p, entry, at);
    const raw = existing ? `${existing.content.replace(/\n*$/, '\n')}${appended}` : `# Log of ${scope}\n\n${appended}`;
    const content = analyzeContent(raw, 'log');
    const excerpt = entry.split('\n')[0]!.slice(0, 72);
    const row = await commitPage(ctx, trx, p, { action: existing ? 'update' : 'create', existing, target, content, message: `Log ${scope}: ${excerpt}` });
    // The hash the caller may see: a redacted view's own validator when the log holds a block
    // above it; none for a caller that may not read the log (it would vouch for unseen text).
    const hash = canReadPage(p, rowFacts(row)) ? { content_hash: presentPage(p, row).content_hash } : {};
    return { id: row.id, path: row.path, commit_sha: row.commit_sha, ...hash, appended };
  });
}
