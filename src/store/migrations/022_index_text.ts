import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';

/**
 * Issues 18 and 20: the keyword index reads a section's text the way a query reads the user's
 * words (retrieval/keyword.ts `queryTerms`): NFKC-folded, then runs of letters and digits.
 *
 * - PostgreSQL's parser kept file paths, host names, e-mail addresses, URLs and dotted
 *   versions whole (`/etc/passwd`, `nsswitch.conf`, `user@example.com` were one lexeme each)
 *   and dropped anything shaped like an XML tag or entity (`<command>`, `&amp;`), while a query
 *   is split into its words: `passwd` did not find a page that wrote `/etc/passwd`. Neither
 *   engine folded compatibility characters (a ligature `ﬁ`, full-width letters, superscripts)
 *   that a query folds, so `file` did not find `ﬁle`.
 * - PostgreSQL: `cv_index_text(t)` folds with NFKC when the text is not already so (a quick
 *   check), drops combining diacritical marks left over (U+0300–U+036F with no precomposed
 *   letter), makes ASCII punctuation spaces, then folds diacritics (`cv_fold`, migration 017).
 *   On the evaluation corpus it costs about a third more than `to_tsvector` alone (0.26 ms a
 *   2 kB section). The column is recomputed with it and its index rebuilt with migration 019's
 *   options; the lexemes change, so the word statistics (term_stats) are counted again.
 *   `normalize()` needs a UTF8 database; on any other encoding the text is not NFKC-folded.
 *   A section too large for a tsvector (1 MB) is indexed by the first part of it that fits.
 * - SQLite: the indexer gives FTS5 the text as queries read it (`indexText`, retrieval/keyword.ts:
 *   NFKC, and anything but letters, digits and marks a space; FTS5's own Unicode tables are
 *   older and read later symbols as letters). Rows indexed before are redone by the background
 *   re-index job (migration 010), requested here when a section holds any non-ASCII character
 *   (only those can change).
 *
 * SQL only: a migration is a snapshot of its day.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  if (dialect !== 'postgres') {
    await sql`insert into maintenance_jobs (name, requested_at, done)
      select 'reindex_pages', ${new Date().toISOString()}, 0
      where exists (select 1 from page_sections where length(cast(title || heading || text as blob)) <> length(title || heading || text))
      on conflict (name) do update set requested_at = excluded.requested_at, started_at = null, finished_at = null,
        last_id = null, done = 0, total = null, claimed_by = null, claimed_until = null, last_error = null`.execute(db);
    return;
  }
  const utf8 = (await sql<{ e: string }>`select current_setting('server_encoding') as e`.execute(db)).rows[0]?.e === 'UTF8';
  const nfkc = utf8 ? sql.raw(`if not (t is nfkc normalized) then t := normalize(t, nfkc); end if;`) : sql.raw('');
  await sql`create function cv_index_text(t text, cap integer) returns text language plpgsql immutable strict parallel safe as $index$
    begin
      t := left(t, cap);
      ${nfkc}
      -- Combining diacritical marks left over (no precomposed letter for them) go, as SQLite's
      -- tokenizer removes them (remove_diacritics).
      if t ~ '[\\u0300-\\u036f]' then t := regexp_replace(t, '[\\u0300-\\u036f]+', '', 'g'); end if;
      return cv_fold(regexp_replace(left(t, cap), '[!-/:-@[-\`{-~]+', ' ', 'g'));
    end
    $index$`.execute(db);
  // A tsvector holds at most 1 MB: a section of 30,000 distinct hashes (a checksum list) failed
  // its page's write (500). Such a section is indexed by the first half of each column, then
  // the first quarter, until it fits; any other section as a whole. The exception block costs
  // about 20 µs a section (a subtransaction with nothing to write).
  await sql`create function cv_section_tsv(title text, heading text, body text) returns tsvector language plpgsql immutable parallel safe as $tsv$
    declare
      cap integer := 2147483647;
    begin
      loop
        begin
          return setweight(to_tsvector('english', cv_index_text(coalesce(title, ''), cap)), 'A') ||
            setweight(to_tsvector('english', cv_index_text(coalesce(heading, ''), cap)), 'B') ||
            to_tsvector('english', cv_index_text(coalesce(body, ''), cap));
        exception when program_limit_exceeded then
          cap := least(cap, greatest(length(title), length(heading), length(body))) / 2;
        end;
      end loop;
    end
    $tsv$`.execute(db);
  await sql`alter table page_sections drop column tsv`.execute(db);
  await sql`alter table page_sections add column tsv tsvector generated always as (cv_section_tsv(title, heading, text)) stored`.execute(db);
  await sql`create index page_sections_tsv on page_sections using gin (tsv) with (gin_pending_list_limit = 256)`.execute(db);
  await sql`delete from term_stats`.execute(db);
  await sql`insert into term_stats (workspace_id, lexeme, level, docs)
      select s.workspace_id, x.lexeme, s.level, count(*) from page_sections s cross join unnest(tsvector_to_array(s.tsv) || '{""}'::text[]) as x(lexeme)
      group by 1, 2, 3`.execute(db);
}
