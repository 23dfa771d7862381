import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';

/**
 * Issue 12: background work that an upgrade asks for. A migration changes the schema and copies
 * data with SQL only; work that needs today's application code (re-indexing pages from their
 * rows, re-embedding) is requested here as a row and done by the server after it starts serving
 * (src/retrieval/reindex-job.ts), in batches, resumable, reported in /readyz and the log.
 *
 * `last_id` is where the job stands (it goes in page id order); `done` and `total` are its
 * progress; `claimed_by` / `claimed_until` is the lease of the node that runs it, so two nodes of
 * one PostgreSQL deployment never both do.
 *
 * Migration 005 used to re-index every page inside the migration. A database that ran 001–004
 * with pages (or one upgraded from before 004 now) has live pages with no index rows: every
 * indexed live page answers to at least its path in page_keys, so a live page without a key was
 * never indexed, and the job is requested. A fresh database (no pages) and one whose pages the
 * old 005 indexed get no job.
 */
export async function up(db: Kysely<unknown>, _dialect: Dialect): Promise<void> {
  await sql`create table maintenance_jobs (
    name text primary key,
    requested_at text not null,
    started_at text,
    finished_at text,
    last_id text,
    done integer not null default 0,
    total integer,
    claimed_by text,
    claimed_until text,
    last_error text
  )`.execute(db);
  await sql`insert into maintenance_jobs (name, requested_at, done)
    select 'reindex_pages', ${new Date().toISOString()}, 0
    where exists (
      select 1 from pages p
      where p.deleted_at is null
        and not exists (select 1 from page_keys k where k.page_id = p.id)
    )`.execute(db);
}
