import fs from 'node:fs/promises';
import path from 'node:path';
import type { Executor } from '../db.js';
import type { TreeEntry } from './codec.js';
import { exists, loosePath, readMainRef, setMainRef, writeAtomic, writeLoose } from './export.js';
import { exportPack } from './pack-export.js';
import { ObjectStore } from './object-store.js';
import { runGit } from './process.js';

/**
 * The bare repository `git http-backend` serves for one workspace (DESIGN.md §8). It is only a
 * cache of the database: deleting it loses nothing. Objects are only ever added, and main is
 * moved only after everything it reaches is written, so git's own invariant holds at every
 * instant and the ref it holds marks how far the cache is in step with the database.
 */

/** Our settings of the cache repository; the file is rewritten when it differs. */
const CONFIG = `[core]
\trepositoryformatversion = 0
\tfilemode = true
\tbare = true
\tlogallrefupdates = false
[http]
\treceivepack = true
\tuploadpack = true
[receive]
\tdenyNonFastForwards = true
\tdenyDeletes = true
\tfsckObjects = true
\tautogc = false
[gc]
\tauto = 0
[uploadpack]
\tallowAnySHA1InWant = false
[pack]
\twriteBitmapHashCache = true
`;

/** Above this many loose objects written by one sync, they are packed (clones read packs far faster). */
const REPACK_LOOSE = 400;
/** The longest a repack may run (a 10,000-page history takes about two minutes on a loaded 2-core machine). */
const REPACK_TIMEOUT_MS = 60 * 60 * 1000;
/** Above this many packs, they are folded into one. */
const MAX_PACKS = 16;

export interface HookFile {
  name: string;
  content: string;
}

/** Creates the repository if needed and makes its config and hooks ours. */
export async function prepareBareRepo(dir: string, hooks: readonly HookFile[]): Promise<void> {
  if (!(await exists(path.join(dir, 'HEAD'))) || !(await exists(path.join(dir, 'objects')))) {
    await fs.mkdir(dir, { recursive: true });
    const r = await runGit(['init', '--bare', '--quiet', '--initial-branch=main', dir], { cwd: dir });
    if (r.code !== 0) throw new Error(`git init failed: ${r.stderr}`);
  }
  await writeIfChanged(path.join(dir, 'config'), CONFIG, 0o644);
  // main is the only branch, even before the first commit: an empty clone must be on it.
  await writeIfChanged(path.join(dir, 'HEAD'), 'ref: refs/heads/main\n', 0o644);
  await fs.mkdir(path.join(dir, 'hooks'), { recursive: true });
  for (const h of hooks) await writeIfChanged(path.join(dir, 'hooks', h.name), h.content, 0o755);
}

async function writeIfChanged(file: string, content: string, mode: number): Promise<void> {
  if ((await fs.readFile(file, 'utf8').catch(() => null)) === content) return;
  await writeAtomic(file, content, mode);
}

/** The repository exists, is ours (config written) and its main is the database's. */
export async function bareRepoIsCurrent(db: Executor, workspaceId: string, dir: string): Promise<boolean> {
  if ((await fs.readFile(path.join(dir, 'config'), 'utf8').catch(() => null)) !== CONFIG) return false;
  const head = await new ObjectStore(db, workspaceId).getRef('refs/heads/main');
  return head === (await readMainRef(dir));
}

/**
 * Brings the cache up to the database's main: writes the objects of the commits made since the
 * commit the cache's main holds (walking only the trees that changed), then moves main. Falls
 * back to a full export when the cache is new or not on the database's line (e.g. restored from
 * elsewhere). Returns how many objects were written.
 */
export async function syncBareRepo(db: Executor, workspaceId: string, dir: string): Promise<{ objects: number; full: boolean }> {
  const store = new ObjectStore(db, workspaceId);
  const head = await store.getRef('refs/heads/main');
  const cached = await readMainRef(dir);
  if (head === cached) return { objects: 0, full: false };
  const from = cached
    ? await db.selectFrom('commits').select('seq').where('workspace_id', '=', workspaceId).where('sha', '=', cached).executeTakeFirst()
    : undefined;
  // Commits after the cached one, in the order they landed: parents before children.
  const commits = from
    ? await db.selectFrom('commits').select('sha').where('workspace_id', '=', workspaceId).where('seq', '>', from.seq).orderBy('seq').execute()
    : [];
  if (!head || !commits.some((c) => c.sha === head)) {
    const { objects } = await exportPack(db, workspaceId, dir);
    await repack(dir, true);
    return { objects, full: true };
  }
  let written = 0;
  const put = async (sha: string): Promise<boolean> => {
    if (await exists(loosePath(dir, sha))) return false;
    const obj = await store.getObject(sha);
    if (!obj) throw new Error(`object ${sha} of workspace ${workspaceId} is missing from the database`);
    await writeLoose(dir, sha, obj.type, obj.body);
    written++;
    return true;
  };
  const walk = async (treeSha: string, before: string | null): Promise<void> => {
    if (treeSha === before) return;
    await put(treeSha);
    const entries = await store.getTree(treeSha);
    const old = new Map<string, TreeEntry>(before ? ((await store.getTree(before)) ?? []).map((e) => [e.name, e]) : []);
    for (const e of entries ?? []) {
      const o = old.get(e.name);
      if (o?.sha === e.sha) continue;
      if (e.mode === '40000') await walk(e.sha, o?.mode === '40000' ? o.sha : null);
      else await put(e.sha);
    }
  };
  for (const { sha } of commits) {
    const commit = await store.getCommit(sha);
    if (!commit) throw new Error(`commit ${sha} of workspace ${workspaceId} is missing from the database`);
    const parent = commit.parents[0] ? await store.getCommit(commit.parents[0]) : null;
    await walk(commit.tree, parent?.tree ?? null);
    // A merge brings trees of its other parents' lines; those commits came earlier in this loop
    // or were already cached, so their objects are present.
    await put(sha);
  }
  await setMainRef(dir, head);
  if (written >= REPACK_LOOSE) await repack(dir, false);
  return { objects: written, full: false };
}

/**
 * Packs loose objects (all: everything into one pack with a reachability bitmap, as a fresh
 * clone reads best). Safe while git serves: packs are written before loose objects go.
 */
export async function repack(dir: string, all: boolean): Promise<void> {
  const packs = (await fs.readdir(path.join(dir, 'objects', 'pack')).catch(() => [] as string[])).filter((f) => f.endsWith('.pack')).length;
  const args = all || packs >= MAX_PACKS ? ['repack', '-a', '-d', '-q', '--write-bitmap-index'] : ['repack', '-d', '-q'];
  // A first pack of a large history can take minutes on a busy machine: no short timeout here.
  const r = await runGit(args, { cwd: dir, env: { GIT_DIR: dir }, timeoutMs: REPACK_TIMEOUT_MS });
  if (r.code !== 0) throw new Error(`git repack failed: ${r.stderr}`);
}
