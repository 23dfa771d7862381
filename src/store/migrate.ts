import { sql, type Kysely } from 'kysely';
import type { Dialect } from './db.js';
import * as m001 from './migrations/001_initial.js';
import * as m002 from './migrations/002_identity.js';
import * as m003 from './migrations/003_collaboration.js';
import * as m004 from './migrations/004_retrieval.js';
import * as m005 from './migrations/005_vectors.js';
import * as m006 from './migrations/006_search_filters.js';
import * as m007 from './migrations/007_agent_custody.js';
import * as m008 from './migrations/008_account_attempts.js';
import * as m009 from './migrations/009_keyword_per_workspace.js';
import * as m010 from './migrations/010_maintenance_jobs.js';
import * as m011 from './migrations/011_watches.js';
import * as m012 from './migrations/012_oauth.js';
import * as m013 from './migrations/013_lifecycle_runs.js';
import * as m014 from './migrations/014_imports.js';
import * as m015 from './migrations/015_section_recency.js';
import * as m016 from './migrations/016_term_stats.js';
import * as m017 from './migrations/017_fast_fold.js';
import * as m018 from './migrations/018_write_lock.js';
import * as m019 from './migrations/019_keyword_window.js';
import * as m020 from './migrations/020_keyword_rank.js';
import * as m021 from './migrations/021_section_archived.js';
import * as m022 from './migrations/022_index_text.js';
import * as m023 from './migrations/023_pg_wide_rows.js';
import * as m024 from './migrations/024_versions_by_commit.js';
import * as m025 from './migrations/025_section_tokens.js';
import * as m026 from './migrations/026_pg_every_word.js';
import * as m027 from './migrations/027_archived_sections.js';
import * as m028 from './migrations/028_lock_reads.js';
import * as m029 from './migrations/029_term_stats_pending.js';

interface Migration {
  name: string;
  up(db: Kysely<unknown>, dialect: Dialect): Promise<void>;
}

/** Ordered list; append only. Each runs in its own transaction and is recorded once. */
const MIGRATIONS: Migration[] = [
  { name: '001_initial', up: m001.up },
  { name: '002_identity', up: m002.up },
  { name: '003_collaboration', up: m003.up },
  { name: '004_retrieval', up: m004.up },
  { name: '005_vectors', up: m005.up },
  { name: '006_search_filters', up: m006.up },
  { name: '007_agent_custody', up: m007.up },
  { name: '008_account_attempts', up: m008.up },
  { name: '009_keyword_per_workspace', up: m009.up },
  { name: '010_maintenance_jobs', up: m010.up },
  { name: '011_watches', up: m011.up },
  { name: '012_oauth', up: m012.up },
  { name: '013_lifecycle_runs', up: m013.up },
  { name: '014_imports', up: m014.up },
  { name: '015_section_recency', up: m015.up },
  { name: '016_term_stats', up: m016.up },
  { name: '017_fast_fold', up: m017.up },
  { name: '018_write_lock', up: m018.up },
  { name: '019_keyword_window', up: m019.up },
  { name: '020_keyword_rank', up: m020.up },
  { name: '021_section_archived', up: m021.up },
  { name: '022_index_text', up: m022.up },
  { name: '023_pg_wide_rows', up: m023.up },
  { name: '024_versions_by_commit', up: m024.up },
  { name: '025_section_tokens', up: m025.up },
  { name: '026_pg_every_word', up: m026.up },
  { name: '027_archived_sections', up: m027.up },
  { name: '028_lock_reads', up: m028.up },
  { name: '029_term_stats_pending', up: m029.up },
];

/**
 * The database holds migrations this build does not know: a newer version migrated it. Serving
 * it could misread or damage what the newer schema means (a migration may drop or reshape
 * tables), so the node refuses to start (docs/deploy.md, upgrades).
 */
export class SchemaAheadError extends Error {
  constructor(readonly unknown: string[]) {
    super(
      `the database was migrated by a newer version of Context Vault (migrations this version does not know: ${unknown.join(', ')}); ` +
        'start the newer version instead (downgrades are not supported)',
    );
    this.name = 'SchemaAheadError';
  }
}

export async function migrate<T>(db: Kysely<T>, dialect: Dialect): Promise<string[]> {
  const k = db as unknown as Kysely<unknown>;
  // Two nodes creating it at once race inside PostgreSQL's catalog ("duplicate key value violates
  // unique constraint pg_type_typname_nsp_index") even with IF NOT EXISTS, so they take turns.
  await k.transaction().execute(async (trx) => {
    if (dialect === 'postgres') await sql`select pg_advisory_xact_lock(7714201)`.execute(trx);
    await sql`create table if not exists schema_migrations (name text primary key, applied_at text not null)`.execute(trx);
  });
  const known = new Set(MIGRATIONS.map((m) => m.name));
  const recorded = await sql<{ name: string }>`select name from schema_migrations order by name`.execute(k);
  const unknown = recorded.rows.map((r) => r.name).filter((n) => !known.has(n));
  if (unknown.length > 0) throw new SchemaAheadError(unknown);
  const applied: string[] = [];
  for (const m of MIGRATIONS) {
    await k.transaction().execute(async (trx) => {
      if (dialect === 'postgres') {
        // Two nodes starting at once: one migrates, the other waits and then sees it done.
        await sql`select pg_advisory_xact_lock(7714201)`.execute(trx);
      }
      const done = await sql<{ name: string }>`select name from schema_migrations where name = ${m.name}`.execute(trx);
      if (done.rows.length > 0) return;
      await m.up(trx, dialect);
      await sql`insert into schema_migrations (name, applied_at) values (${m.name}, ${new Date().toISOString()})`.execute(trx);
      applied.push(m.name);
    });
  }
  return applied;
}
