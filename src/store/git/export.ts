import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { deflateSync, inflateSync } from 'node:zlib';
import type { Executor } from '../db.js';
import { hashObject, type ObjectType } from './codec.js';
import { ObjectStore } from './object-store.js';

const execFileP = promisify(execFile);

/** Shas listed per page of the keyset scan (only shas: cheap even when most objects exist). */
const SCAN_PAGE = 500;
/** Objects whose data is fetched per query: bounds memory by a few dozen bodies. */
const FETCH_BATCH = 50;
const MAIN_REF = 'refs/heads/main';

export async function exists(file: string): Promise<boolean> {
  try {
    await fs.access(file);
    return true;
  } catch {
    return false;
  }
}

/** Write then rename, so a reader (or a crash) never sees a half-written file. */
export async function writeAtomic(file: string, data: Buffer | string, mode: number): Promise<void> {
  const tmp = path.join(path.dirname(file), `tmp_${process.pid}_${randomBytes(6).toString('hex')}`);
  await fs.writeFile(tmp, data, { mode });
  await fs.rename(tmp, file);
}

export function loosePath(dir: string, sha: string): string {
  return path.join(dir, 'objects', sha.slice(0, 2), sha.slice(2));
}

export async function writeLoose(dir: string, sha: string, type: ObjectType, body: Buffer): Promise<void> {
  // Never write bytes that do not hash to their name: git would report the repository corrupt.
  if (hashObject(type, body) !== sha) throw new Error(`object ${sha} does not match its content`);
  const file = loosePath(dir, sha);
  await fs.mkdir(path.dirname(file), { recursive: true });
  await writeAtomic(file, deflateSync(Buffer.concat([Buffer.from(`${type} ${body.length}\0`), body])), 0o444);
}

/** Creates a bare repository at `dir` (main as its branch) unless one is there. */
export async function initBareRepo(dir: string): Promise<void> {
  if ((await exists(path.join(dir, 'HEAD'))) && (await exists(path.join(dir, 'objects')))) return;
  await fs.mkdir(dir, { recursive: true });
  await execFileP('git', ['init', '--bare', '--quiet', '--initial-branch=main', dir]);
}

/** A workspace's objects in pages of ids (keyset by sha: cheap even when most objects are known). */
export async function* scanObjects(db: Executor, workspaceId: string): AsyncGenerator<{ sha: string; base_sha: string | null; depth: number | string }[]> {
  let after = '';
  for (;;) {
    const page = await db
      .selectFrom('git_objects')
      .select(['sha', 'base_sha', 'depth'])
      .where('workspace_id', '=', workspaceId)
      .where('sha', '>', after)
      .orderBy('sha')
      .limit(SCAN_PAGE)
      .execute();
    if (page.length === 0) return;
    after = page[page.length - 1]!.sha;
    yield page;
  }
}

/** The stored rows (type and compressed data) of objects stored whole, a batch per query. */
export async function* storedObjects(db: Executor, workspaceId: string, shas: readonly string[], batch: number) {
  for (let i = 0; i < shas.length; i += batch) {
    const rows = await db
      .selectFrom('git_objects')
      .select(['sha', 'type', 'data'])
      .where('workspace_id', '=', workspaceId)
      .where('sha', 'in', shas.slice(i, i + batch))
      .execute();
    if (rows.length !== Math.min(batch, shas.length - i)) throw new Error(`objects of workspace ${workspaceId} vanished during export`);
    yield* rows;
  }
}

/**
 * Brings a bare repository at `dir` up to date with a workspace: initialises it if needed, writes
 * every object not already present as a loose object, then sets refs/heads/main and HEAD.
 * Idempotent; returns how many objects were written.
 */
export async function exportToBareRepo(db: Executor, workspaceId: string, dir: string): Promise<{ objects: number }> {
  await initBareRepo(dir);

  const store = new ObjectStore(db, workspaceId);
  // Read the ref before the objects: everything it reaches was committed with it, so the scan
  // below sees all of it. Reading it afterwards could name a commit the scan missed.
  const main = await store.getRef(MAIN_REF);

  let written = 0;
  const pendingDeltas: Array<{ sha: string; depth: number }> = [];
  for await (const page of scanObjects(db, workspaceId)) {
    const missing: string[] = [];
    for (const row of page) {
      if (await exists(loosePath(dir, row.sha))) continue;
      if (row.base_sha !== null) pendingDeltas.push({ sha: row.sha, depth: Number(row.depth) });
      else missing.push(row.sha);
    }
    for await (const row of storedObjects(db, workspaceId, missing, FETCH_BATCH)) {
      await writeLoose(dir, row.sha, row.type, inflateSync(row.data));
      written++;
    }
  }

  // Shallow deltas first: each rebuilt tree lands in the tree cache, so the deeper trees built
  // on it next usually stop after one row instead of walking their whole chain.
  pendingDeltas.sort((a, b) => a.depth - b.depth);
  for (const { sha } of pendingDeltas) {
    const obj = await store.getObject(sha);
    if (!obj) throw new Error(`object ${sha} of workspace ${workspaceId} vanished during export`);
    await writeLoose(dir, sha, obj.type, obj.body);
    written++;
  }

  await setMainRef(dir, main);
  return { objects: written };
}

/** Points the repository's main (and HEAD) at `sha`, or removes main when the workspace has no commit. */
export async function setMainRef(dir: string, sha: string | null): Promise<void> {
  const refFile = path.join(dir, 'refs', 'heads', 'main');
  if (sha) {
    const current = await fs.readFile(refFile, 'utf8').catch(() => '');
    if (current.trim() !== sha) {
      await fs.mkdir(path.dirname(refFile), { recursive: true });
      await writeAtomic(refFile, `${sha}\n`, 0o644);
    }
  } else {
    await fs.rm(refFile, { force: true });
  }
  const headFile = path.join(dir, 'HEAD');
  const head = `ref: ${MAIN_REF}\n`;
  if ((await fs.readFile(headFile, 'utf8').catch(() => '')) !== head) await writeAtomic(headFile, head, 0o644);
}

/** The sha main points at in the repository (loose or packed ref), or null. */
export async function readMainRef(dir: string): Promise<string | null> {
  const loose = (await fs.readFile(path.join(dir, 'refs', 'heads', 'main'), 'utf8').catch(() => '')).trim();
  if (/^[0-9a-f]{40}$/.test(loose)) return loose;
  const packed = await fs.readFile(path.join(dir, 'packed-refs'), 'utf8').catch(() => '');
  const m = /^([0-9a-f]{40}) refs\/heads\/main$/m.exec(packed);
  return m ? m[1]! : null;
}
