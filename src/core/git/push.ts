import path from 'node:path';
import type { Transaction } from 'kysely';
import { decideDelete, decideMove, decideWrite, enforce } from '../../policy/pages.js';
import { decideGitPush } from '../../policy/git.js';
import type { Principal } from '../../policy/principal.js';
import { loadLivePage } from '../../retrieval/lookup.js';
import { parseCommit, readTreeEntries, validateName, type RawTreeEntry } from '../../store/git/codec.js';
import { ObjectStore } from '../../store/git/object-store.js';
import { ObjectReader, runGit } from '../../store/git/process.js';
import type { DB, PagesTable } from '../../store/schema.js';
import { inTransaction } from '../../store/tx.js';
import { appendAudit } from '../audit.js';
import type { CoreContext } from '../context.js';
import { badRequest, conflict, ServiceError } from '../errors.js';
import { parsePagePath } from '../paths.js';
import { MAIN_REF, recordCommit } from '../pages/commit.js';
import { analyzeContent, MAX_PAGE_BYTES, type PageContent } from '../pages/content.js';
import { facts, recordPageChange, rowFacts, type Action } from '../pages/persist.js';

/**
 * A git push becoming pages (spec §4 "Git", DESIGN.md §8). git's pre-receive hook hands us the
 * pushed ref update while the pushed objects wait in git's quarantine; we check the pusher and
 * every changed file, then store the objects with their own ids and apply each commit's changes
 * as page creates, updates, moves and deletes, all in one transaction. A refusal (thrown
 * ServiceError) refuses the push: git then drops the quarantine and nothing has changed.
 */

const ZERO = '0000000000000000000000000000000000000000';
/** At most this many refused files are listed; the rest are counted. */
const MAX_REPORTED = 20;
/** Trees and commits above this are not a notes repository's (a page is at most 1 MiB). */
const MAX_OBJECT_BYTES = 16 * 1024 * 1024;
/** Commit messages are kept in full in git; the page history keeps this much (as REST allows). */
const MAX_MESSAGE = 2000;

/** Where git put the pushed objects (the hook's environment), all inside the repository. */
export interface Quarantine {
  objectDirectory: string;
  alternates: string;
  quarantinePath: string;
}

export interface PushRequest {
  /** The cache repository receiving the push. */
  repoDir: string;
  /** The hook's stdin: `<old> <new> <ref>` per line. */
  updates: string;
  quarantine: Quarantine;
}

export interface PushResult {
  commits: number;
  changes: number;
  head: string;
}

interface Entry {
  mode: string;
  sha: string;
}

interface FileChange {
  path: string;
  before: Entry | null;
  after: Entry | null;
}

interface PageChange {
  action: Extract<Action, 'create' | 'update' | 'move' | 'delete'>;
  path: string;
  from?: string;
  content: PageContent | null;
  blobSha: string | null;
}

interface PushedCommit {
  sha: string;
  parent: string | null;
  message: string;
  changes: PageChange[];
}

const refused = (message: string) => new ServiceError(400, 'push_refused', message);

/** Checks that git's quarantine paths are inside the repository (they come from the hook). */
function objectEnv(repoDir: string, q: Quarantine): NodeJS.ProcessEnv {
  const root = path.resolve(repoDir) + path.sep;
  const inside = (p: string) => path.resolve(p).startsWith(root);
  const alternates = q.alternates.split(':').filter(Boolean);
  if (!inside(q.objectDirectory) || !inside(q.quarantinePath) || !alternates.every(inside))
    throw badRequest('The push quarantine is outside the repository', 'invalid_request');
  return { GIT_DIR: repoDir, GIT_OBJECT_DIRECTORY: q.objectDirectory, GIT_ALTERNATE_OBJECT_DIRECTORIES: q.alternates, GIT_QUARANTINE_PATH: q.quarantinePath };
}

function parseUpdates(text: string): { old: string | null; next: string } {
  const lines = text.split('\n').filter((l) => l.trim() !== '');
  const updates = lines.map((l) => {
    const [old = '', next = '', ref = ''] = l.trim().split(' ');
    if (!/^[0-9a-f]{40}$/.test(old) || !/^[0-9a-f]{40}$/.test(next) || !ref) throw badRequest('Malformed ref update from git', 'invalid_request');
    return { old, next, ref };
  });
  const others = updates.filter((u) => u.ref !== MAIN_REF).map((u) => u.ref);
  if (others.length > 0) throw refused(`Only main can be pushed here; refused: ${others.join(', ')}`);
  const main = updates[0];
  if (!main || updates.length !== 1) throw refused('Nothing to push to main');
  if (main.next === ZERO) throw refused('main cannot be deleted');
  return { old: main.old === ZERO ? null : main.old, next: main.next };
}

/** Why a tree entry cannot be a page, or null when its mode is a regular file's. */
function modeProblem(mode: string): string | null {
  if (mode === '100644') return null;
  if (mode === '100755') return 'is executable (pages are plain files: chmod -x it)';
  if (mode === '120000') return 'is a symbolic link (pages are plain files)';
  if (mode === '160000') return 'is a submodule (pages are plain files)';
  return `has mode ${mode} (pages are plain files)`;
}

class PushReader {
  private readonly trees = new Map<string, RawTreeEntry[]>();
  readonly objects = new Map<string, { type: string; body: Buffer }>();

  constructor(private readonly reader: ObjectReader) {}

  async get(sha: string): Promise<{ type: string; body: Buffer }> {
    const hit = this.objects.get(sha);
    if (hit) return hit;
    const obj = await this.reader.read(sha);
    if (!obj) throw badRequest(`Object ${sha} is missing from the push`, 'invalid_object');
    return obj;
  }

  async tree(sha: string | null): Promise<RawTreeEntry[]> {
    if (!sha) return [];
    const hit = this.trees.get(sha);
    if (hit) return hit;
    const obj = await this.get(sha);
    if (obj.type !== 'tree') throw badRequest(`Object ${sha} is a ${obj.type}, not a tree`, 'invalid_object');
    const entries = readTreeEntries(obj.body);
    this.trees.set(sha, entries);
    return entries;
  }

  /** The files (non-tree entries) that differ between two trees, by path. */
  async diff(a: string | null, b: string | null, prefix = ''): Promise<FileChange[]> {
    if (a === b) return [];
    const left = new Map((await this.tree(a)).map((e) => [e.name, e]));
    const right = new Map((await this.tree(b)).map((e) => [e.name, e]));
    const out: FileChange[] = [];
    for (const name of new Set([...left.keys(), ...right.keys()])) {
      const l = left.get(name);
      const r = right.get(name);
      if (l && r && l.sha === r.sha && l.mode === r.mode) continue;
      const full = prefix + name;
      const lTree = l?.mode === '40000' ? l.sha : null;
      const rTree = r?.mode === '40000' ? r.sha : null;
      if (lTree || rTree) out.push(...(await this.diff(lTree, rTree, `${full}/`)));
      const lFile = l && l.mode !== '40000' ? { mode: l.mode, sha: l.sha } : null;
      const rFile = r && r.mode !== '40000' ? { mode: r.mode, sha: r.sha } : null;
      if (lFile || rFile) out.push({ path: full, before: lFile, after: rFile });
    }
    return out;
  }

  /** Every file of a tree, by path (a merge is judged against the state the push has reached). */
  async flatten(sha: string | null, prefix = '', into = new Map<string, Entry>()): Promise<Map<string, Entry>> {
    for (const e of await this.tree(sha)) {
      if (e.mode === '40000') await this.flatten(e.sha, `${prefix}${e.name}/`, into);
      else into.set(prefix + e.name, { mode: e.mode, sha: e.sha });
    }
    return into;
  }
}

/** The page changes of one commit's file changes; problems are collected, not thrown. */
async function judge(files: FileChange[], reader: PushReader, problems: string[]): Promise<PageChange[]> {
  const out: PageChange[] = [];
  const added = files.filter((f) => f.after && !f.before);
  const removed = files.filter((f) => f.before && !f.after);
  const movedFrom = new Map<string, string>();
  const taken = new Set<string>();
  // A move is the same blob leaving one path and arriving at another in one commit.
  for (const a of added) {
    const r = removed.find((x) => x.before!.sha === a.after!.sha && x.before!.mode === a.after!.mode && !taken.has(x.path));
    if (r) {
      movedFrom.set(a.path, r.path);
      taken.add(r.path);
    }
  }
  for (const f of files) {
    if (!f.after) {
      if (!taken.has(f.path)) out.push({ action: 'delete', path: f.path, content: null, blobSha: null });
      continue;
    }
    const problem = await fileProblem(f.path, f.after, reader);
    if (typeof problem === 'string') {
      problems.push(`${f.path}: ${problem}`);
      continue;
    }
    const from = movedFrom.get(f.path);
    out.push({ action: from ? 'move' : f.before ? 'update' : 'create', path: f.path, ...(from ? { from } : {}), content: problem, blobSha: f.after.sha });
  }
  return out;
}

/** The analysed page a pushed file would be, or why it cannot be one. */
async function fileProblem(filePath: string, after: Entry, reader: PushReader): Promise<PageContent | string> {
  const bad = modeProblem(after.mode);
  if (bad) return bad;
  try {
    for (const seg of filePath.split('/')) validateName(seg);
    const target = parsePagePath(filePath);
    const blob = await reader.get(after.sha);
    let raw: string;
    try {
      raw = new TextDecoder('utf-8', { fatal: true }).decode(blob.body);
    } catch {
      return 'is not valid UTF-8 text';
    }
    return analyzeContent(raw, target.slug);
  } catch (e) {
    if (e instanceof ServiceError) return e.message;
    throw e;
  }
}

function historyMessage(text: string): string {
  const m = text.trim();
  return m.length > MAX_MESSAGE ? `${m.slice(0, MAX_MESSAGE - 1)}…` : m;
}

/** Reads, checks and imports a push; throws a ServiceError whose message git shows the pusher. */
export async function importPush(ctx: CoreContext, p: Principal, req: PushRequest): Promise<PushResult> {
  enforce(decideGitPush(p));
  const { old, next } = parseUpdates(req.updates);
  const env = objectEnv(req.repoDir, req.quarantine);

  const list = await runGit(['rev-list', '--topo-order', '--reverse', next, ...(old ? [`^${old}`] : [])], { cwd: req.repoDir, env });
  if (list.code !== 0) throw badRequest(`git could not list the pushed commits: ${list.stderr.trim()}`, 'invalid_object');
  const shas = list.stdout.toString('latin1').split('\n').filter(Boolean);
  const objectList = await runGit(['rev-list', '--objects', next, ...(old ? [`^${old}`] : [])], { cwd: req.repoDir, env });
  if (objectList.code !== 0) throw badRequest(`git could not list the pushed objects: ${objectList.stderr.trim()}`, 'invalid_object');

  const listed = objectList.stdout
    .toString('utf8')
    .split('\n')
    .filter((l) => l.length >= 40)
    .map((l) => ({ sha: l.slice(0, 40), path: l.slice(41) }));
  await refuseOversized(req.repoDir, env, listed);

  const cat = new ObjectReader(req.repoDir, env);
  try {
    const reader = new PushReader(cat);
    for (const { sha } of listed) reader.objects.set(sha, await reader.get(sha));
    const commits: PushedCommit[] = [];
    const problems: string[] = [];
    const parsed = [];
    for (const sha of shas) {
      const obj = await reader.get(sha);
      if (obj.type !== 'commit') throw badRequest(`${sha} is not a commit`, 'invalid_object');
      parsed.push({ sha, ...parseCommit(obj.body) });
    }
    const fastForward = old === null || parsed.some((c) => c.parents.includes(old));
    // With a merge in the push, side lines are applied in their turn and each merge is judged
    // against the files the push has reached so far (its own tree is the truth).
    const state = parsed.some((c) => c.parents.length > 1) ? await reader.flatten(old ? await treeOf(reader, old) : null) : null;
    for (const c of parsed) {
      let files: FileChange[];
      if (c.parents.length > 1 && state) {
        const target = await reader.flatten(c.tree);
        files = [...new Set([...state.keys(), ...target.keys()])]
          .filter((f) => state.get(f)?.sha !== target.get(f)?.sha || state.get(f)?.mode !== target.get(f)?.mode)
          .map((f) => ({ path: f, before: state.get(f) ?? null, after: target.get(f) ?? null }));
      } else {
        files = await reader.diff(c.parents[0] ? await treeOf(reader, c.parents[0]) : null, c.tree);
      }
      for (const f of state ? files : []) {
        if (f.after) state!.set(f.path, f.after);
        else state!.delete(f.path);
      }
      commits.push({ sha: c.sha, parent: c.parents[0] ?? null, message: historyMessage(c.message), changes: await judge(files, reader, problems) });
    }
    if (!fastForward) throw refused('Only fast-forwards of main are accepted: fetch, merge or rebase onto main, and push again');
    if (problems.length > 0) {
      const shown = problems.slice(0, MAX_REPORTED);
      const more = problems.length > shown.length ? [`… and ${problems.length - shown.length} more`] : [];
      throw refused(['This push cannot be imported; nothing was changed:', ...shown, ...more].join('\n'));
    }
    return await applyPush(ctx, p, { old, next, commits, objects: reader.objects });
  } finally {
    cat.close();
  }
}

/**
 * Sizes first, bodies after: a blob that inflates to gigabytes (a pack compresses zeros well)
 * is refused by its size before anything reads it into memory.
 */
async function refuseOversized(repoDir: string, env: NodeJS.ProcessEnv, listed: { sha: string; path: string }[]): Promise<void> {
  const check = await runGit(['cat-file', '--batch-check=%(objectname) %(objecttype) %(objectsize)'], {
    cwd: repoDir,
    env,
    input: listed.map((o) => o.sha).join('\n') + '\n',
  });
  if (check.code !== 0) throw badRequest(`git could not size the pushed objects: ${check.stderr.trim()}`, 'invalid_object');
  const pathOf = new Map(listed.map((o) => [o.sha, o.path]));
  const problems: string[] = [];
  for (const line of check.stdout.toString('latin1').split('\n')) {
    const [sha = '', type = '', size = '0'] = line.split(' ');
    const limit = type === 'blob' ? MAX_PAGE_BYTES : MAX_OBJECT_BYTES;
    if (Number(size) > limit) problems.push(`${pathOf.get(sha) || sha}: ${type} of ${size} bytes is larger than ${limit} bytes`);
  }
  if (problems.length > 0) throw refused(['This push cannot be imported; nothing was changed:', ...problems.slice(0, MAX_REPORTED)].join('\n'));
}

async function treeOf(reader: PushReader, commitSha: string): Promise<string> {
  const obj = await reader.get(commitSha);
  if (obj.type !== 'commit') throw badRequest(`${commitSha} is not a commit`, 'invalid_object');
  return parseCommit(obj.body).tree;
}

/** One transaction: the objects with their ids, each commit's page changes, then main. */
async function applyPush(
  ctx: CoreContext,
  p: Principal,
  push: { old: string | null; next: string; commits: PushedCommit[]; objects: Map<string, { type: string; body: Buffer }> },
): Promise<PushResult> {
  const at = new Date();
  return inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const store = new ObjectStore(trx, p.workspaceId);
    const head = await store.getRef(MAIN_REF);
    if (head !== push.old) {
      throw conflict(
        'main has moved on the server since you fetched (a write through the web app, REST or MCP): fetch, merge or rebase, and push again',
        'conflict',
      );
    }
    for (const [, obj] of push.objects) {
      if (obj.type !== 'blob' && obj.type !== 'tree' && obj.type !== 'commit')
        throw refused(`Objects of type ${obj.type} (e.g. annotated tags) cannot be pushed`);
      await store.putObject(obj.type, obj.body);
    }
    let changes = 0;
    // Pages this push deleted, by path: a later commit of the push that brings the path back (a
    // merge keeping what a side line deleted) revives the same page, keeping its id.
    const deleted = new Map<string, PagesTable>();
    for (const c of push.commits) {
      const seq = await recordCommit(trx, p.workspaceId, { sha: c.sha, parent: c.parent, principalId: p.id, message: c.message, at });
      for (const ch of c.changes) {
        const step = { commit: { sha: c.sha, seq }, message: c.message || `Push ${ch.path}`, at, deleted };
        if (await applyChange(ctx, trx, p, ch, step)) changes++;
      }
    }
    await store.casRef(MAIN_REF, push.old, push.next);
    await appendAudit(
      trx,
      p.workspaceId,
      { principalId: p.id, action: 'git.push', detail: { from: push.old, to: push.next, commits: push.commits.length, changes, token: p.keyId } },
      at,
    );
    return { commits: push.commits.length, changes, head: push.next };
  });
}

/**
 * One file change of a pushed commit, judged against the pages as they are at this point of the
 * push (a side line's commit may touch a page the main line has moved or deleted meanwhile).
 * Returns false when there was nothing to change.
 */
async function applyChange(
  ctx: CoreContext,
  trx: Transaction<DB>,
  p: Principal,
  ch: PageChange,
  step: { commit: { sha: string; seq: number }; message: string; at: Date; deleted: Map<string, PagesTable> },
): Promise<boolean> {
  const { commit, message, at, deleted } = step;
  const target = parsePagePath(ch.path);
  const atPath = (await loadLivePage(trx, p.workspaceId, { path: ch.path })) ?? null;
  const remove = async (page: PagesTable) => {
    enforce(decideDelete(p, rowFacts(page)));
    await recordPageChange(ctx, trx, p, {
      action: 'delete',
      existing: page,
      target: parsePagePath(page.path),
      content: null,
      message,
      commit,
      blobSha: null,
      at,
    });
    deleted.set(page.path, page);
  };
  if (ch.action === 'delete') {
    if (!atPath) return false;
    await remove(atPath);
    return true;
  }
  const content = ch.content!;
  const source = ch.from ? ((await loadLivePage(trx, p.workspaceId, { path: ch.from })) ?? null) : null;
  // A move keeps the page's id; onto an occupied path it is an update there and a delete here.
  const revived = !atPath && !source ? deleted.get(ch.path) : undefined;
  if (revived) deleted.delete(ch.path);
  const existing = (source && !atPath ? source : atPath) ?? revived ?? null;
  const action = existing ? (existing === source ? 'move' : 'update') : 'create';
  enforce(decideWrite(p, existing ? rowFacts(existing) : null, facts(ch.path, content)));
  if (action === 'move') enforce(decideMove(p, true));
  await recordPageChange(ctx, trx, p, { action, existing, target, content, message, commit, blobSha: ch.blobSha, at });
  if (source && existing !== source) await remove(source);
  return true;
}
