import { sql, type Transaction } from 'kysely';
import { LEVELS } from '../policy/sensitivity.js';
import type { Executor, Store } from '../store/db.js';
import type { DB } from '../store/schema.js';
import { inTransaction } from '../store/tx.js';
import { indexPagesOfAnyWorkspace } from './indexer.js';
import { ensureKeywordIndex, indexSections, isSqlite, keywordTable } from './keyword-index.js';

/**
 * Re-indexing on the operator's demand (`context-vault reindex`), with progress. The same way as
 * the background job (reindex-job.ts): pages in id order, a batch per transaction, each page with
 * `indexPages` (the code every write uses), the batch's workspaces locked as writes lock them. A
 * page's old index rows are replaced in the same transaction as its new ones, so search stays
 * complete while it runs (unlike `reindexAll`, which empties the SQLite index first).
 */
export async function reindexPages(
  store: Store,
  opts: { workspaceId?: string | undefined; batch?: number; onProgress?: (done: number, total: number) => void } = {},
): Promise<{ pages: number }> {
  const batch = opts.batch ?? 100;
  const live = () => {
    let q = store.db.selectFrom('pages').where('deleted_at', 'is', null);
    if (opts.workspaceId) q = q.where('workspace_id', '=', opts.workspaceId);
    return q;
  };
  const total = Number(
    (
      await live()
        .select(sql<number>`count(*)`.as('n'))
        .executeTakeFirstOrThrow()
    ).n,
  );
  opts.onProgress?.(0, total);
  let last = '';
  let done = 0;
  for (;;) {
    const next = await live().select(['id', 'workspace_id']).where('id', '>', last).orderBy('id').limit(batch).execute();
    if (next.length === 0) break;
    const ids = next.map((p) => p.id);
    const workspaces = [...new Set(next.map((p) => p.workspace_id))].sort();
    done += await inTransaction(store, null, async (trx) => {
      if (store.dialect === 'postgres') await sql`select id from workspaces where id in (${sql.join(workspaces)}) order by id for update`.execute(trx);
      const rows = await trx.selectFrom('pages').selectAll().where('id', 'in', ids).where('deleted_at', 'is', null).orderBy('id').execute();
      await indexPagesOfAnyWorkspace(trx, rows);
      return rows.length;
    });
    last = ids[ids.length - 1]!;
    opts.onProgress?.(done, Math.max(total, done));
  }
  return { pages: done };
}

/**
 * Fills the engine's derived keyword data from `page_sections` (a restored backup carries the
 * sections, not these): SQLite's per-workspace keyword tables; PostgreSQL's word statistics
 * (its tsvector column is computed on insert).
 */
export async function rebuildKeywordIndexes(db: Executor | Transaction<DB>): Promise<void> {
  if (!isSqlite(db)) {
    // Sections from a SQLite backup may hold no length yet (SQLite does not read it).
    await sql`update page_sections set tokens = cv_section_tokens(title, heading, text) where tokens = 0`.execute(db);
    await sql`delete from term_stats`.execute(db);
    await sql`delete from term_stats_pending`.execute(db);
    await sql`insert into term_stats (workspace_id, lexeme, level, docs)
      select s.workspace_id, x.lexeme, s.level, count(*) from page_sections s cross join unnest(tsvector_to_array(s.tsv) || '{""}'::text[]) as x(lexeme)
      group by 1, 2, 3
      union all
      select workspace_id, ' ', level, sum(tokens) from page_sections group by 1, 3`.execute(db);
    return;
  }
  const workspaces = await db.selectFrom('workspaces').select('id').execute();
  for (const { id } of workspaces) {
    await ensureKeywordIndex(db, id);
    for (const level of LEVELS) {
      const t = keywordTable(id, level);
      await sql`insert into ${t} (${t}) values ('delete-all')`.execute(db);
    }
    const pages = await db
      .selectFrom('pages')
      .select('id')
      .where('workspace_id', '=', id)
      .where((eb) => eb.exists(eb.selectFrom('page_sections').select('page_sections.id').whereRef('page_sections.page_id', '=', 'pages.id')))
      .execute();
    for (let i = 0; i < pages.length; i += 200)
      await indexSections(
        db,
        id,
        pages.slice(i, i + 200).map((p) => p.id),
      );
  }
}
