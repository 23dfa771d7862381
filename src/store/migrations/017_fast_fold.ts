import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';
import { FOLD_FROM, FOLD_TO } from './004_retrieval.js';

/**
 * Issue 18: PostgreSQL's keyword column folded diacritics with one `translate()` over the ~700
 * precomposed Latin letters of migration 004. translate() walks that list for every character of
 * the text: 0.9 ms for a 500-character section, 13 times the cost of `to_tsvector` itself, and
 * it ran inside every page write's lock (8 of the 12 ms a create held it).
 *
 * `cv_fold` folds the same letters to the same ASCII letters, one Unicode block at a time and
 * only when the text holds a letter of that block (a regular expression finds out in
 * microseconds): ASCII text is not translated at all, French or German text only against the 57
 * letters of Latin-1. The blocks are disjoint and fold to ASCII, so the order of the steps does
 * not change the result: cv_fold(t) = translate(t, FOLD_FROM, FOLD_TO) for every t
 * (test/retrieval/fast-fold.test.ts). The column is recomputed with it (PostgreSQL 15 cannot
 * change a generation expression in place) and its index rebuilt: the lexemes are the same, so
 * the word statistics stand. SQL only: a migration is a snapshot of its day.
 */

/** Migration 004's letters split by Unicode block, with the character class that finds each. */
const BLOCKS: { cls: string; lo: number; hi: number }[] = [
  { cls: '[À-ÿ]', lo: 0xc0, hi: 0xff },
  { cls: '[Ā-ɏ]', lo: 0x100, hi: 0x24f },
  { cls: '[Ḁ-ỿ]', lo: 0x1e00, hi: 0x1eff },
];

export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  if (dialect !== 'postgres') return;
  const from = [...FOLD_FROM];
  const to = [...FOLD_TO];
  const steps = BLOCKS.map(({ cls, lo, hi }) => {
    let f = '';
    let t = '';
    from.forEach((ch, i) => {
      const cp = ch.codePointAt(0)!;
      if (cp >= lo && cp <= hi) {
        f += ch;
        t += to[i]!;
      }
    });
    return sql`if t ~ ${sql.lit(cls)} then t := translate(t, ${sql.lit(f)}, ${sql.lit(t)}); end if;`;
  });
  await sql`create function cv_fold(t text) returns text language plpgsql immutable strict parallel safe as $fold$
    begin
      ${sql.join(steps, sql`\n      `)}
      return t;
    end
    $fold$`.execute(db);
  await sql`alter table page_sections drop column tsv`.execute(db);
  await sql`alter table page_sections add column tsv tsvector generated always as (
      setweight(to_tsvector('english', cv_fold(title)), 'A') ||
      setweight(to_tsvector('english', cv_fold(heading)), 'B') ||
      to_tsvector('english', cv_fold(text))
    ) stored`.execute(db);
  await sql`create index page_sections_tsv on page_sections using gin (tsv)`.execute(db);
}
