import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';
import { optionalText, requiredInteger, requiredText } from './columns.js';

/**
 * Retrieval (vector slice): the embedding backlog, the section vectors and a change log that
 * lets every node keep its in-memory matrices current.
 *
 * This migration once re-indexed every live page itself (keyword rows, links and a place in the
 * backlog) by calling the indexer: application code inside a migration, one transaction as long
 * as the deployment is large, and the service down until it ended. Migrations are SQL only now:
 * a database whose pages are not indexed yet (it ran 001–004 with pages) gets a `reindex_pages`
 * job from migration 010, which the server runs in the background (src/retrieval/reindex-job.ts).
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  const table = (name: string) => db.schema.createTable(name);
  const pg = dialect === 'postgres';
  // One row per page whose vectors are behind its content (the write that queued it says which content).
  await table('embed_jobs')
    .addColumn('page_id', 'text', (c) => c.primaryKey())
    .$call(requiredText('workspace_id', 'content_hash', 'queued_at'))
    .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
    .$call(optionalText('not_before', 'last_error'))
    .execute();
  await db.schema.createIndex('embed_jobs_queue').on('embed_jobs').columns(['queued_at']).execute();

  await table('section_vectors')
    .$call(requiredText('page_id'))
    // The window of sections the vector stands for: ord (first) to last_ord.
    .$call(requiredInteger('ord', 'last_ord'))
    // model: provider:model:dimensions (modelKey); vectors of another key are stale and re-embedded.
    .$call(requiredText('workspace_id', 'model', 'text_hash'))
    .addColumn('vec', pg ? 'bytea' : 'blob', (c) => c.notNull())
    .addPrimaryKeyConstraint('section_vectors_pk', ['page_id', 'ord'])
    .execute();
  // Serves the matrix load: one workspace's vectors of one model, in page order, without a sort.
  await db.schema.createIndex('section_vectors_ws').on('section_vectors').columns(['workspace_id', 'model', 'page_id', 'ord']).execute();

  // Appended whenever a page's vectors change; nodes replay it to refresh their matrices.
  if (pg) {
    await sql`create table vector_log (seq bigserial primary key, workspace_id text not null, page_id text not null, at text not null)`.execute(db);
  } else {
    await sql`create table vector_log (seq integer primary key autoincrement, workspace_id text not null, page_id text not null, at text not null)`.execute(db);
  }
  await db.schema.createIndex('vector_log_ws').on('vector_log').columns(['workspace_id', 'seq']).execute();

  if (!pg) {
    // Document frequency per indexed (stemmed) term: lets the any-word fallback skip words that
    // match a large part of the workspace (see keywordCandidates).
    await sql`create virtual table page_sections_vocab using fts5vocab(page_sections_fts, 'row')`.execute(db);
  }

  // Existing pages are indexed (and so queued for vectors) by the background job of migration 010.
}
