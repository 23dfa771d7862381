import { badRequest, conflict } from '../../errors/index.js';
import { findEntry, isSha, mergeEntries, validateName, type TreeEntry } from './codec.js';
import type { ObjectStore } from './object-store.js';

/** Sets (blobSha) or removes (null) the file at `path`, e.g. `space/folder/sub/page.md`. */
export interface PathChange {
  path: string;
  blobSha: string | null;
}

export interface FileEntry {
  path: string;
  sha: string;
}

/** Splits and validates a repository path; every segment must be a valid tree entry name. */
export function splitPath(path: string): string[] {
  const segments = path.split('/');
  for (const s of segments) validateName(s);
  return segments;
}

interface ChangeNode {
  /** Set when this node is a file being written or removed. */
  file?: string | null;
  children?: Map<string, ChangeNode>;
}

function buildChangeTree(changes: readonly PathChange[]): ChangeNode {
  const root: ChangeNode = { children: new Map() };
  for (const change of changes) {
    if (change.blobSha !== null && !isSha(change.blobSha)) {
      throw badRequest(`Invalid blob id for ${change.path}`, 'invalid_object');
    }
    const segments = splitPath(change.path);
    let node = root;
    segments.forEach((name, i) => {
      // A name may be both a file change and a folder of changes (a page moved into a folder
      // named after it, or out of one): rewriteTree judges whether the result is a tree.
      const children = (node.children ??= new Map());
      let next = children.get(name);
      const leaf = i === segments.length - 1;
      if (!next) {
        next = leaf ? {} : { children: new Map() };
        children.set(name, next);
      }
      // The last change to a path wins, as if applied in order.
      if (leaf) next.file = change.blobSha;
      node = next;
    });
  }
  return root;
}

/** The sha of every existing tree a change set rewrites (the root, then the folders on its paths). */
export async function treesOnPaths(store: ObjectStore, rootTreeSha: string | null, changes: readonly PathChange[]): Promise<string[]> {
  const out: string[] = [];
  const walk = async (treeSha: string | null, node: ChangeNode): Promise<void> => {
    if (treeSha === null) return;
    out.push(treeSha);
    const entries = await store.getTree(treeSha);
    if (!entries) return;
    for (const [name, child] of node.children ?? []) {
      if (!child.children) continue;
      const e = findEntry(entries, name);
      if (e?.mode === '40000') await walk(e.sha, child);
    }
  };
  await walk(rootTreeSha, buildChangeTree(changes));
  return out;
}

/** Rewrites one tree; returns its new sha, the old sha when nothing changed, or null when it became empty. */
async function rewriteTree(store: ObjectStore, treeSha: string | null, node: ChangeNode, prefix: string): Promise<string | null> {
  const old = treeSha ? await store.getTree(treeSha) : [];
  if (!old) throw new Error(`tree ${String(treeSha)} is missing from workspace ${store.workspaceId}`);
  // Entries are looked up and replaced in the sorted list: a folder of thousands of pages is
  // neither re-keyed into a map nor re-sorted for a commit that changes one of them.
  const removed = new Set<TreeEntry>();
  const added: TreeEntry[] = [];
  for (const [name, child] of node.children ?? []) {
    const path = prefix ? `${prefix}/${name}` : name;
    const current = findEntry(old, name);
    if (child.file !== undefined && child.children) {
      // A file and a folder of this name change at once: at most one of them may remain.
      const curFile = current?.mode === '100644' ? current : undefined;
      const curFolder = current?.mode === '40000' ? current : undefined;
      const folder = await rewriteTree(store, curFolder?.sha ?? null, { children: child.children }, path);
      const file = child.file;
      if (folder !== null && file !== null) {
        // A folder that keeps other files, or a change set that writes both.
        if (curFolder) throw conflict(`${path} is a folder, not a file`);
        throw badRequest(`${path} is both a file and a folder in one change set`, 'invalid_path');
      }
      if (curFile && file !== curFile.sha) removed.add(curFile);
      if (file !== null && file !== curFile?.sha) added.push({ mode: '100644', name, sha: file });
      if (curFolder && folder !== curFolder.sha) removed.add(curFolder);
      if (folder !== null && folder !== curFolder?.sha) added.push({ mode: '40000', name, sha: folder });
    } else if (child.file !== undefined) {
      if (current?.mode === '40000') throw conflict(`${path} is a folder, not a file`);
      if (child.file === null) {
        if (current) removed.add(current);
      } else if (current?.sha !== child.file) {
        if (current) removed.add(current);
        added.push({ mode: '100644', name, sha: child.file });
      }
    } else {
      if (current && current.mode !== '40000') throw conflict(`${path} is a file, not a folder`);
      const sub = await rewriteTree(store, current?.sha ?? null, child, path);
      if (sub === null) {
        if (current) removed.add(current);
      } else if (sub !== current?.sha) {
        if (current) removed.add(current);
        added.push({ mode: '40000', name, sha: sub });
      }
    }
  }
  if (removed.size === 0 && added.length === 0) return treeSha;
  const entries = mergeEntries(old, removed, added);
  // Git has no empty trees: an emptied folder disappears from its parent.
  if (entries.length === 0) return null;
  return store.putTree(entries, treeSha);
}

/**
 * Applies file changes to a root tree and returns the new root tree sha. Intermediate trees are
 * created as needed, emptied trees are removed (an empty root is the empty tree), and every
 * rewritten tree is stored against its previous version so it can be kept as a delta.
 */
export async function applyChanges(store: ObjectStore, rootTreeSha: string | null, changes: readonly PathChange[]): Promise<string> {
  const root = await rewriteTree(store, rootTreeSha, buildChangeTree(changes), '');
  return root ?? store.putTree([], rootTreeSha);
}

/** The blob sha of the file at `path`, or null when there is no file there. */
export async function readPath(store: ObjectStore, rootTreeSha: string | null, path: string): Promise<string | null> {
  const segments = splitPath(path);
  let treeSha = rootTreeSha;
  for (let i = 0; i < segments.length; i++) {
    if (!treeSha) return null;
    const tree = await store.getTree(treeSha);
    if (!tree) throw new Error(`tree ${treeSha} is missing from workspace ${store.workspaceId}`);
    const entry = findEntry(tree, segments[i]!);
    if (!entry) return null;
    if (i === segments.length - 1) return entry.mode === '100644' ? entry.sha : null;
    if (entry.mode !== '40000') return null;
    treeSha = entry.sha;
  }
  return null;
}

/** Every file under the root, in the order `git ls-tree -r` prints them. */
export async function listTree(store: ObjectStore, rootTreeSha: string | null): Promise<FileEntry[]> {
  const out: FileEntry[] = [];
  if (!rootTreeSha) return out;
  const walk = async (treeSha: string, prefix: string): Promise<void> => {
    const tree = await store.getTree(treeSha);
    if (!tree) throw new Error(`tree ${treeSha} is missing from workspace ${store.workspaceId}`);
    for (const e of tree) {
      const path = prefix ? `${prefix}/${e.name}` : e.name;
      if (e.mode === '40000') await walk(e.sha, path);
      else out.push({ path, sha: e.sha });
    }
  };
  await walk(rootTreeSha, '');
  return out;
}
