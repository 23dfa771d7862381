import type { PageRecord } from '../core/pages/record.js';
import type { UpsertResult } from '../core/pages/upsert.js';
import type { UpdateResult } from '../core/pages/write.js';

/**
 * A page as each face shows it. One source: the page record core makes for the caller
 * (core/pages/record.ts `presentPage`, redacted to their ceiling), which is the REST answer of a
 * read, a create, a move, an archive and a restore (its JSON shape is `PageRecordSchema`). The
 * other views below are cut from it here, never rebuilt by a face.
 */

/** `PUT`/`PATCH /api/v1/nodes/:id`: the record and what the write did (`WriteResultSchema`). */
export function writeResultView(o: UpdateResult) {
  return { ...o.record, changed: o.changed, merged: o.merged };
}

/** `context_get`: the record without `body` (the content holds it already). */
export function pageToolView(r: PageRecord): Omit<PageRecord, 'body'> {
  const { body: _body, ...rest } = r;
  return rest;
}

/**
 * `context_get` with `section`: that section and the page's identity (enough to cite it and to
 * write with base_sha), not the whole page again.
 */
export function sectionToolView(r: PageRecord) {
  return { id: r.id, path: r.path, title: r.title, commit_sha: r.commit_sha, state: r.state, redacted: r.redacted, section: r.section ?? '' };
}

/** A page read over MCP (`context_get`, `context_get_at`): the whole page, or with `section` only that section. */
export function readToolView(r: PageRecord, section: string | undefined) {
  return section === undefined ? pageToolView(r) : sectionToolView(r);
}

/** `context_write`: where the page is now and what the write did. */
export function writeToolView(r: UpsertResult) {
  const rec = r.record;
  return {
    id: rec.id,
    path: rec.path,
    created: r.created,
    changed: r.changed,
    merged: r.merged,
    commit_sha: rec.commit_sha,
    content_hash: rec.content_hash,
    state: rec.state,
  };
}

/** `context_archive` / `context_restore` of one page: its new state and the commit. */
export function stateToolView(r: PageRecord) {
  return { id: r.id, path: r.path, state: r.state, commit_sha: r.commit_sha };
}

/** The page's REST URL, which the connector tools (`search`, `fetch`) answer. */
export function pageUrl(publicUrl: string, id: string): string {
  return `${publicUrl.replace(/\/+$/, '')}/api/v1/nodes/${encodeURIComponent(id)}`;
}

/** `fetch`: the connector's document shape. */
export function fetchToolView(publicUrl: string, r: PageRecord) {
  return {
    id: r.id,
    title: r.title,
    text: r.content,
    url: pageUrl(publicUrl, r.id),
    metadata: { path: r.path, state: r.state, commit_sha: r.commit_sha, last_touched_at: r.last_touched_at, redacted: r.redacted },
  };
}
