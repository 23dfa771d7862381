import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { promisify } from 'node:util';
import { deflate, inflate } from 'node:zlib';
import type { Executor } from '../db.js';
import type { ObjectType } from './codec.js';
import { initBareRepo, scanObjects, setMainRef, storedObjects } from './export.js';
import { ObjectStore } from './object-store.js';
import { gitEnv } from './process.js';

const inflateP = promisify(inflate);
const deflateP = promisify(deflate);

/** Objects fetched per query while streaming the pack. */
const FETCH_BATCH = 200;
const PACK_TYPE: Record<ObjectType, number> = { commit: 1, tree: 2, blob: 3 };

/** A pack entry's header: type and inflated size, seven bits at a time (git's pack format v2). */
function entryHeader(type: ObjectType, size: number): Buffer {
  const bytes: number[] = [];
  let b = (PACK_TYPE[type] << 4) | (size & 0x0f);
  let rest = Math.floor(size / 16);
  while (rest > 0) {
    bytes.push(b | 0x80);
    b = rest & 0x7f;
    rest = Math.floor(rest / 128);
  }
  bytes.push(b);
  return Buffer.from(bytes);
}

/**
 * Writes every object of a workspace into the bare repository at `dir` as ONE pack, streamed into
 * `git index-pack` (which checks each object's id and writes the index), then points main at
 * the database's head. A full export of a long history as loose objects costs a file (and a
 * compression) per object; here objects stored whole are copied compressed as they are, and
 * only trees stored as deltas are rebuilt and compressed, off the event loop.
 */
export async function exportPack(db: Executor, workspaceId: string, dir: string): Promise<{ objects: number }> {
  await initBareRepo(dir);
  const store = new ObjectStore(db, workspaceId);
  // The ref before the objects: everything it reaches was committed with it (see export.ts).
  const main = await store.getRef('refs/heads/main');
  const whole: string[] = [];
  const deltas: { sha: string; depth: number }[] = [];
  for await (const page of scanObjects(db, workspaceId)) {
    for (const row of page) {
      if (row.base_sha === null) whole.push(row.sha);
      else deltas.push({ sha: row.sha, depth: Number(row.depth) });
    }
  }
  const count = whole.length + deltas.length;
  if (count > 0) await streamPack(db, store, workspaceId, dir, whole, deltas);
  await setMainRef(dir, main);
  return { objects: count };
}

async function streamPack(db: Executor, store: ObjectStore, workspaceId: string, dir: string, whole: string[], deltas: { sha: string; depth: number }[]) {
  const child = spawn('git', ['index-pack', '--stdin'], { cwd: dir, env: { ...gitEnv(), GIT_DIR: dir }, stdio: ['pipe', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => {
    if (stderr.length < 4096) stderr += c.toString('utf8');
  });
  const exited = new Promise<number>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => resolve(code ?? -1));
  });
  child.stdin.on('error', () => undefined);
  // git gone early (it refused the pack) must fail the export, not leave it waiting to write.
  const gone = exited.then((code) => {
    throw new Error(`git index-pack stopped early (${code}): ${stderr.trim()}`);
  });
  gone.catch(() => undefined);
  const hash = createHash('sha1');
  const write = async (buf: Buffer) => {
    hash.update(buf);
    if (!child.stdin.write(buf)) await Promise.race([new Promise<void>((resolve) => child.stdin.once('drain', () => resolve())), gone]);
  };

  const header = Buffer.alloc(12);
  header.write('PACK', 0, 'latin1');
  header.writeUInt32BE(2, 4);
  header.writeUInt32BE(whole.length + deltas.length, 8);
  try {
    await write(header);
    for await (const row of storedObjects(db, workspaceId, whole, FETCH_BATCH)) {
      // The stored bytes are already the zlib stream a pack entry holds; only the size is needed.
      const size = (await inflateP(row.data)).length;
      await write(Buffer.concat([entryHeader(row.type, size), row.data]));
    }
    // Shallow deltas first: each rebuilt tree lands in the tree cache for the deeper ones.
    deltas.sort((a, b) => a.depth - b.depth);
    for (const { sha } of deltas) {
      const obj = await store.getObject(sha);
      if (!obj) throw new Error(`object ${sha} of workspace ${workspaceId} vanished during export`);
      await write(Buffer.concat([entryHeader(obj.type, obj.body.length), await deflateP(obj.body)]));
    }
    const trailer = hash.digest();
    child.stdin.end(trailer);
  } catch (e) {
    child.kill('SIGKILL');
    throw e;
  }
  const code = await exited;
  // index-pack verifies every object against its id: a mismatch fails the export, never the repo.
  if (code !== 0) throw new Error(`git index-pack refused the exported pack: ${stderr.trim()}`);
}
