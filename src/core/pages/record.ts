import { createHash } from 'node:crypto';
import { documentBody, findSection, redactDocument } from '../../markdown/index.js';
import { blockVisibility } from '../../policy/pages.js';
import type { Principal } from '../../policy/principal.js';
import { atOrBelow, isLevel } from '../../policy/sensitivity.js';
import type { PagesTable } from '../../store/schema.js';
import { ceilingFor } from '../../policy/access.js';
import { notFound } from '../errors.js';
import { analyzeContent } from './content.js';

/** The page record both REST and MCP return (docs/api.md). */
export interface PageRecord {
  id: string;
  path: string;
  space: string;
  cluster_path: string;
  title: string;
  /** Full markdown including frontmatter, redacted to the caller's ceiling. */
  content: string;
  body: string;
  frontmatter: Record<string, unknown>;
  tags: string[];
  links: { target: string; kind: 'wiki' | 'markdown'; text: string }[];
  sensitivity: string;
  state: string;
  archived_reason: string | null;
  archived_at: string | null;
  commit_sha: string;
  content_hash: string;
  /** True when blocks above the caller's ceiling were replaced by `[redacted]`. */
  redacted: boolean;
  created_at: string;
  updated_at: string;
  last_touched_at: string | null;
  created_by: string;
  updated_by: string;
  /** Set when `section` was asked: that section's markdown. */
  section?: string;
}

export type PageRow = Pick<
  PagesTable,
  | 'id'
  | 'path'
  | 'space'
  | 'cluster_path'
  | 'content'
  | 'content_hash'
  | 'commit_sha'
  | 'sensitivity'
  | 'block_level'
  | 'created_at'
  | 'updated_at'
  | 'last_touched_at'
  | 'created_by'
  | 'updated_by'
> &
  /** What the write path already derived and stored; absent for older versions read with `at=`. */
  Partial<Pick<PagesTable, 'title' | 'frontmatter' | 'tags' | 'links' | 'state'>>;

/**
 * The content hash shown for a redacted view: derived only from what the caller sees (the
 * redacted text), prefixed `r-` so it never equals a git blob sha. The blob sha of the full
 * text would let a reader brute-force a short hidden block offline. Never a merge base: a
 * caller who cannot see a block cannot write that page.
 */
export function redactedValidator(redactedContent: string): string {
  return `r-${createHash('sha256').update('context-vault redacted view\0').update(redactedContent).digest('hex').slice(0, 40)}`;
}

function slugOf(path: string): string {
  return (path.split('/').pop() ?? path).replace(/\.md$/, '');
}

/**
 * Renders a page (or one version of it) for a caller who may read it: blocks above the
 * ceiling become `[redacted]`, and everything derived (title, tags, links) is derived
 * from the redacted text so nothing hidden leaks through them.
 */
export function presentPage(p: Principal, row: PageRow, opts: { section?: string | undefined } = {}): PageRecord {
  const ceiling = ceilingFor(p, 'read', row.path) ?? 'public';
  const blockLevel = isLevel(row.block_level) ? row.block_level : null;
  const redacted = blockLevel !== null && !atOrBelow(blockLevel, ceiling);
  const content = redacted ? redactDocument(row.content, blockVisibility(p, row.path)) : row.content;
  // Unredacted current pages reuse what the write stored: no markdown parse on the read path.
  const a =
    !redacted && row.title !== undefined && row.frontmatter !== undefined && row.tags !== undefined && row.links !== undefined && row.state !== undefined
      ? {
          title: row.title,
          body: documentBody(content),
          frontmatter: JSON.parse(row.frontmatter) as Record<string, unknown>,
          tags: JSON.parse(row.tags) as string[],
          links: JSON.parse(row.links) as PageRecord['links'],
          state: row.state,
        }
      : analyzeContent(content, slugOf(row.path));
  const record: PageRecord = {
    id: row.id,
    path: row.path,
    space: row.space,
    cluster_path: row.cluster_path,
    title: a.title,
    content,
    body: a.body,
    frontmatter: a.frontmatter,
    tags: a.tags,
    links: a.links,
    sensitivity: row.sensitivity,
    state: a.state,
    archived_reason: typeof a.frontmatter.archived_reason === 'string' ? a.frontmatter.archived_reason : null,
    archived_at: typeof a.frontmatter.archived_at === 'string' ? a.frontmatter.archived_at : null,
    commit_sha: row.commit_sha,
    content_hash: redacted ? redactedValidator(content) : row.content_hash,
    redacted,
    created_at: row.created_at,
    updated_at: row.updated_at,
    last_touched_at: row.last_touched_at,
    created_by: row.created_by,
    updated_by: row.updated_by,
  };
  if (opts.section !== undefined) {
    const text = findSection(a.body, opts.section);
    if (text === null) throw notFound(`No section titled "${opts.section}" in ${row.path}`, 'section_not_found');
    // A section ends where the next heading starts; trailing blank lines are not part of it.
    record.section = text.replace(/(\r?\n)+$/, '\n');
  }
  return record;
}
