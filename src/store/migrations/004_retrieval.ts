import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';
import { optionalText, requiredInteger, requiredText, workspaceFk } from './columns.js';

/**
 * The diacritics folding baked into the PostgreSQL tsvector column below: each precomposed Latin
 * letter (U+00C0–U+024F, U+1E00–U+1EFF) whose compatibility decomposition is one ASCII letter
 * plus marks, and that letter. A SNAPSHOT of `PG_FOLD` in src/retrieval/keyword.ts as it was when
 * this migration was written (queries fold with that constant; test/http/reindex-job.test.ts
 * checks they still agree). A migration holds no application code: never import it here, and
 * change the folding only with a new migration.
 */
export const FOLD_FROM =
  'ÀÁÂÃÄÅÇÈÉÊËÌÍÎÏÑÒÓÔÕÖÙÚÛÜÝàáâãäåçèéêëìíîïñòóôõöùúûüýÿĀāĂăĄąĆćĈĉĊċČčĎďĒēĔĕĖėĘęĚěĜĝĞğĠġĢģĤĥĨĩĪīĬĭĮįİĴĵĶķĹĺĻļĽľŃńŅņŇňŌōŎŏŐőŔŕŖŗŘřŚśŜŝŞşŠšŢţŤťŨũŪūŬŭŮůŰűŲųŴŵŶŷŸŹźŻżŽžſƠơƯưǍǎǏǐǑǒǓǔǕǖǗǘǙǚǛǜǞǟǠǡǦǧǨǩǪǫǬǭǰǴǵǸǹǺǻȀȁȂȃȄȅȆȇȈȉȊȋȌȍȎȏȐȑȒȓȔȕȖȗȘșȚțȞȟȦȧȨȩȪȫȬȭȮȯȰȱȲȳḀḁḂḃḄḅḆḇḈḉḊḋḌḍḎḏḐḑḒḓḔḕḖḗḘḙḚḛḜḝḞḟḠḡḢḣḤḥḦḧḨḩḪḫḬḭḮḯḰḱḲḳḴḵḶḷḸḹḺḻḼḽḾḿṀṁṂṃṄṅṆṇṈṉṊṋṌṍṎṏṐṑṒṓṔṕṖṗṘṙṚṛṜṝṞṟṠṡṢṣṤṥṦṧṨṩṪṫṬṭṮṯṰṱṲṳṴṵṶṷṸṹṺṻṼṽṾṿẀẁẂẃẄẅẆẇẈẉẊẋẌẍẎẏẐẑẒẓẔẕẖẗẘẙẛẠạẢảẤấẦầẨẩẪẫẬậẮắẰằẲẳẴẵẶặẸẹẺẻẼẽẾếỀềỂểỄễỆệỈỉỊịỌọỎỏỐốỒồỔổỖỗỘộỚớỜờỞởỠỡỢợỤụỦủỨứỪừỬửỮữỰựỲỳỴỵỶỷỸỹ';
export const FOLD_TO =
  'AAAAAACEEEEIIIINOOOOOUUUUYaaaaaaceeeeiiiinooooouuuuyyAaAaAaCcCcCcCcDdEeEeEeEeEeGgGgGgGgHhIiIiIiIiIJjKkLlLlLlNnNnNnOoOoOoRrRrRrSsSsSsSsTtTtUuUuUuUuUuUuWwYyYZzZzZzsOoUuAaIiOoUuUuUuUuUuAaAaGgKkOoOojGgNnAaAaAaEeEeIiIiOoOoRrRrUuUuSsTtHhAaEeOoOoOoOoYyAaBbBbBbCcDdDdDdDdDdEeEeEeEeEeFfGgHhHhHhHhHhIiIiKkKkKkLlLlLlLlMmMmMmNnNnNnNnOoOoOoOoPpPpRrRrRrRrSsSsSsSsSsTtTtTtTtUuUuUuUuUuVvVvWwWwWwWwWwXxXxYyZzZzZzhtwysAaAaAaAaAaAaAaAaAaAaAaAaEeEeEeEeEeEeEeEeIiIiOoOoOoOoOoOoOoOoOoOoOoOoUuUuUuUuUuUuUuYyYyYyYy';

/**
 * Retrieval (keyword slice): sections with the engine's full-text index, links between pages,
 * tags and the names a page answers to (for `[[wiki]]` links). All of it is written by
 * commitPage inside the page's own transaction. Pages that existed before are indexed by the
 * background job that migration 010 requests (src/retrieval/reindex-job.ts): SQL only here.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  const table = (name: string) => db.schema.createTable(name);
  const pg = dialect === 'postgres';
  const fold = (col: string) => sql`translate(${sql.ref(col)}, ${sql.lit(FOLD_FROM)}, ${sql.lit(FOLD_TO)})`;
  // PostgreSQL indexes a section by a generated tsvector column; SQLite by an FTS5 table (below).
  const tsv = pg
    ? sql`
      tsv tsvector generated always as (
        setweight(to_tsvector('english', ${fold('title')}), 'A') ||
        setweight(to_tsvector('english', ${fold('heading')}), 'B') ||
        to_tsvector('english', ${fold('text')})
      ) stored,`
    : sql``;
  // SQLite keeps this text, white space included, as the table's definition in sqlite_master.
  await sql`create table page_sections (
      id ${sql.raw(pg ? 'bigserial' : 'integer')} primary key,
      workspace_id text not null references workspaces(id),
      page_id text not null,
      ord integer not null,
      title text not null,
      heading text not null,
      heading_level integer not null,
      text text not null,
      block_level text,${tsv}
      unique (page_id, ord)
    )`.execute(db);
  if (pg) {
    await sql`create index page_sections_tsv on page_sections using gin (tsv)`.execute(db);
  } else {
    // External-content FTS5 over page_sections, kept in step by triggers.
    await sql`create virtual table page_sections_fts using fts5(
      title, heading, text,
      content='page_sections', content_rowid='id',
      tokenize='porter unicode61 remove_diacritics 2'
    )`.execute(db);
    await sql`create trigger page_sections_ai after insert on page_sections begin
      insert into page_sections_fts(rowid, title, heading, text) values (new.id, new.title, new.heading, new.text);
    end`.execute(db);
    await sql`create trigger page_sections_ad after delete on page_sections begin
      insert into page_sections_fts(page_sections_fts, rowid, title, heading, text) values ('delete', old.id, old.title, old.heading, old.text);
    end`.execute(db);
    await sql`create trigger page_sections_au after update on page_sections begin
      insert into page_sections_fts(page_sections_fts, rowid, title, heading, text) values ('delete', old.id, old.title, old.heading, old.text);
      insert into page_sections_fts(rowid, title, heading, text) values (new.id, new.title, new.heading, new.text);
    end`.execute(db);
  }
  await db.schema.createIndex('page_sections_ws').on('page_sections').columns(['workspace_id', 'page_id']).execute();

  await table('page_links')
    .$call(workspaceFk)
    .$call(requiredText('source_id'))
    .$call(requiredInteger('ord'))
    // As written in the page (wiki text or markdown href), and how it was written.
    .$call(requiredText('target', 'kind', 'text'))
    // The lowest reader level that sees the link (null: outside every block above public).
    .$call(optionalText('block_level'))
    // What a page must answer to (page_keys) for the link to reach it; null when it cannot resolve.
    .$call(optionalText('target_key', 'target_id'))
    .addPrimaryKeyConstraint('page_links_pk', ['source_id', 'ord'])
    .execute();
  await db.schema.createIndex('page_links_target').on('page_links').columns(['workspace_id', 'target_id']).execute();
  await db.schema.createIndex('page_links_key').on('page_links').columns(['workspace_id', 'target_key']).execute();

  await table('page_keys')
    .$call(workspaceFk)
    .$call(requiredText('key', 'page_id'))
    .addPrimaryKeyConstraint('page_keys_pk', ['workspace_id', 'key', 'page_id'])
    .execute();
  await db.schema.createIndex('page_keys_page').on('page_keys').column('page_id').execute();

  await table('page_tags').$call(workspaceFk).$call(requiredText('page_id', 'tag')).addPrimaryKeyConstraint('page_tags_pk', ['page_id', 'tag']).execute();
  await db.schema.createIndex('page_tags_tag').on('page_tags').columns(['workspace_id', 'tag']).execute();

  // Existing pages are indexed after the upgrade, by the background job (migration 010).
}
