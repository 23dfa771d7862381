import fs from 'node:fs';
import path from 'node:path';
import { createGunzip, createGzip } from 'node:zlib';
import { sql, type Kysely, type Transaction } from 'kysely';
import { ServiceError } from '../errors/index.js';
import type { Dialect, Store } from './db.js';
import type { DB } from './schema.js';

/**
 * Backup and restore: one portable, logical format for both engines (docs/decisions.md,
 * "Issue 16: operator's command line").
 *
 * A backup is gzip'd JSON lines: a header (format, version, engine, the migrations the schema
 * ran, the tables in dependency order with their row counts), then per table a `table` line, its
 * rows as JSON arrays in column order (binary columns as base64), and an `end_table` line; an
 * `end` line closes the file, so a truncated file is refused. Every row is read in ONE snapshot
 * (SQLite: a read transaction, which WAL keeps consistent while the service writes; PostgreSQL:
 * a read-only repeatable-read transaction), table by table in primary-key order and in keyset
 * batches, so nothing is in memory at once. The file is written beside its target and renamed
 * at the end: a failed backup leaves no half file under the name asked for.
 *
 * What is saved is every table of the schema except engine-private ones: SQLite's FTS5 keyword
 * tables (`kw_*`, rebuilt from `page_sections` on restore by the caller's `beforeCommit`) and
 * PostgreSQL's generated `tsv` column (computed again on insert) and word statistics
 * (`term_stats`, rebuilt by the same `beforeCommit`). So a SQLite backup restores
 * into PostgreSQL and back.
 *
 * A restore goes into an EMPTY deployment only (no account, no workspace), with the same schema
 * (the same migrations): all rows in one transaction, in dependency order; PostgreSQL's sequences
 * are moved past the restored ids. Anything a fresh deployment may already hold (rate-limit
 * counters, OAuth client registrations, a maintenance job row) is replaced by the backup's.
 */

export const BACKUP_FORMAT = 'context-vault-backup';
export const BACKUP_VERSION = 1;

const BATCH_ROWS = 500;
/** Bound parameters per INSERT (SQLite allows 32766, PostgreSQL 65535). */
const MAX_PARAMS = 30_000;

export interface BackupTable {
  name: string;
  columns: string[];
  /** Columns holding bytes (base64 in the file). */
  binary: string[];
  rows: number;
}

export interface BackupHeader {
  format: typeof BACKUP_FORMAT;
  version: number;
  created_at: string;
  engine: Dialect;
  app_version: string;
  migrations: string[];
  tables: BackupTable[];
}

export interface Progress {
  (done: number, total: number, table: string): void;
}

export interface BackupSummary {
  file: string;
  bytes: number;
  tables: number;
  rows: number;
  ms: number;
}

interface TableInfo {
  name: string;
  columns: string[];
  binary: string[];
  /** Primary-key columns in key order; empty when the table has none (then `rowid` / all at once). */
  key: string[];
  parents: string[];
}

type Db = Kysely<DB> | Transaction<DB>;

/** A refused backup or restore: what the operator gave or where it goes is wrong (CLI exit 2). */
export function backupError(message: string): ServiceError {
  return new ServiceError(400, 'invalid_request', message);
}

/** Tables of the engine that a backup leaves out: derived and engine-private. */
function skipped(dialect: Dialect, name: string): boolean {
  if (name === 'schema_migrations') return true; // in the header
  if (dialect === 'sqlite') return name.startsWith('sqlite_') || /^kwv?_/.test(name) || name.startsWith('page_sections_');
  return name === 'term_stats' || name === 'term_stats_pending';
}

async function sqliteTables(db: Db): Promise<TableInfo[]> {
  const rows = (await sql<{ name: string; sql: string | null }>`select name, sql from sqlite_master where type = 'table' order by name`.execute(db)).rows;
  const out: TableInfo[] = [];
  for (const r of rows) {
    if (skipped('sqlite', r.name) || /^create virtual/i.test(r.sql ?? '')) continue;
    const cols = (await sql<{ name: string; type: string; pk: number }>`select name, type, pk from pragma_table_info(${r.name}) order by cid`.execute(db)).rows;
    const fks = (await sql<{ table: string }>`select "table" from pragma_foreign_key_list(${r.name})`.execute(db)).rows;
    out.push({
      name: r.name,
      columns: cols.map((c) => c.name),
      binary: cols.filter((c) => /blob/i.test(c.type)).map((c) => c.name),
      key: cols
        .filter((c) => c.pk > 0)
        .sort((a, b) => a.pk - b.pk)
        .map((c) => c.name),
      parents: [...new Set(fks.map((f) => f.table))],
    });
  }
  return out;
}

async function postgresTables(db: Db): Promise<TableInfo[]> {
  const tables = (
    await sql<{ name: string }>`select table_name as name from information_schema.tables
      where table_schema = current_schema() and table_type = 'BASE TABLE' order by table_name`.execute(db)
  ).rows;
  const cols = (
    await sql<{ table_name: string; column_name: string; data_type: string }>`select table_name, column_name, data_type
      from information_schema.columns where table_schema = current_schema() and is_generated = 'NEVER'
      order by table_name, ordinal_position`.execute(db)
  ).rows;
  const keys = (
    await sql<{ table_name: string; column_name: string }>`select kcu.table_name, kcu.column_name
      from information_schema.table_constraints tc
      join information_schema.key_column_usage kcu
        on kcu.constraint_name = tc.constraint_name and kcu.table_schema = tc.table_schema and kcu.table_name = tc.table_name
      where tc.constraint_type = 'PRIMARY KEY' and tc.table_schema = current_schema()
      order by kcu.table_name, kcu.ordinal_position`.execute(db)
  ).rows;
  const fks = (
    await sql<{ child: string; parent: string }>`select c.relname as child, p.relname as parent
      from pg_constraint k join pg_class c on c.oid = k.conrelid join pg_class p on p.oid = k.confrelid
      join pg_namespace n on n.oid = c.relnamespace
      where k.contype = 'f' and n.nspname = current_schema()`.execute(db)
  ).rows;
  return tables
    .filter((t) => !skipped('postgres', t.name))
    .map((t) => {
      const mine = cols.filter((c) => c.table_name === t.name);
      return {
        name: t.name,
        columns: mine.map((c) => c.column_name),
        binary: mine.filter((c) => c.data_type === 'bytea').map((c) => c.column_name),
        key: keys.filter((k) => k.table_name === t.name).map((k) => k.column_name),
        parents: [...new Set(fks.filter((f) => f.child === t.name && f.parent !== t.name).map((f) => f.parent))],
      };
    });
}

/** Parents before children (foreign keys), otherwise by name, so the order is repeatable. */
function dependencyOrder(tables: TableInfo[]): TableInfo[] {
  const byName = new Map(tables.map((t) => [t.name, t]));
  const out: TableInfo[] = [];
  const state = new Map<string, 'visiting' | 'done'>();
  const visit = (t: TableInfo) => {
    const s = state.get(t.name);
    if (s === 'done') return;
    if (s === 'visiting') throw new Error(`foreign keys form a cycle through ${t.name}`);
    state.set(t.name, 'visiting');
    for (const p of [...t.parents].sort()) {
      const parent = byName.get(p);
      if (parent) visit(parent);
    }
    state.set(t.name, 'done');
    out.push(t);
  };
  for (const t of [...tables].sort((a, b) => a.name.localeCompare(b.name))) visit(t);
  return out;
}

async function tablesOf(db: Db, dialect: Dialect): Promise<TableInfo[]> {
  return dependencyOrder(dialect === 'sqlite' ? await sqliteTables(db) : await postgresTables(db));
}

async function appliedMigrations(db: Db): Promise<string[]> {
  return (await sql<{ name: string }>`select name from schema_migrations order by name`.execute(db)).rows.map((r) => r.name);
}

function encode(value: unknown): unknown {
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64');
  if (typeof value === 'bigint') return Number(value);
  return value;
}

/** Reads a table in key order, `BATCH_ROWS` at a time (keyset: no OFFSET, no cursor). */
async function* readTable(db: Db, dialect: Dialect, t: TableInfo): AsyncGenerator<unknown[][]> {
  const cols = sql.join(t.columns.map((c) => sql.ref(c)));
  const table = sql.table(t.name);
  const key = t.key.length > 0 ? t.key : dialect === 'sqlite' ? ['rowid'] : [];
  if (key.length === 0) {
    // No primary key (none in the schema today): the whole table in one read, in a stable order.
    const all = await sql<Record<string, unknown>>`select ${cols} from ${table} order by ${cols}`.execute(db);
    yield all.rows.map((r) => t.columns.map((c) => r[c]));
    return;
  }
  const keyRefs = sql.join(key.map((c) => sql.ref(c)));
  const extra = key.filter((k) => !t.columns.includes(k));
  const select = extra.length > 0 ? sql.join([...t.columns, ...extra].map((c) => sql.ref(c))) : cols;
  let after: unknown[] | null = null;
  for (;;) {
    const where: ReturnType<typeof sql> = after === null ? sql`` : sql`where (${keyRefs}) > (${sql.join(after)})`;
    const res = await sql<Record<string, unknown>>`select ${select} from ${table} ${where} order by ${keyRefs} limit ${BATCH_ROWS}`.execute(db);
    if (res.rows.length === 0) return;
    yield res.rows.map((r) => t.columns.map((c) => r[c]));
    const last = res.rows[res.rows.length - 1]!;
    after = key.map((k) => last[k]);
    if (res.rows.length < BATCH_ROWS) return;
  }
}

/** Writes lines to a gzip'd file, waiting when the stream asks to. */
class LineWriter {
  private readonly gzip = createGzip({ level: 6 });
  private readonly file: fs.WriteStream;
  private readonly done: Promise<void>;

  constructor(target: string) {
    this.file = fs.createWriteStream(target, { flags: 'wx', mode: 0o600 });
    this.done = new Promise((resolve, reject) => {
      this.file.on('close', resolve);
      this.file.on('error', reject);
      this.gzip.on('error', reject);
    });
    this.done.catch(() => undefined);
    this.gzip.pipe(this.file);
  }

  async write(value: unknown): Promise<void> {
    if (!this.gzip.write(`${JSON.stringify(value)}\n`)) await new Promise<void>((r) => this.gzip.once('drain', () => r()));
  }

  async close(): Promise<void> {
    this.gzip.end();
    await this.done;
  }

  destroy(): void {
    this.gzip.destroy();
    this.file.destroy();
  }
}

/** Writes a consistent backup of the whole deployment to `out` (a new file). */
export async function writeBackup(store: Store, out: string, opts: { appVersion: string; onProgress?: Progress; overwrite?: boolean }): Promise<BackupSummary> {
  const t0 = Date.now();
  const target = path.resolve(out);
  if (fs.existsSync(target) && !opts.overwrite) throw backupError(`${target} exists: name a new file (or pass --force to replace it)`);
  if (!fs.existsSync(path.dirname(target))) throw backupError(`The folder ${path.dirname(target)} does not exist`);
  const tmp = `${target}.partial-${process.pid}`;
  const writer = new LineWriter(tmp);
  let rows = 0;
  let tables = 0;
  try {
    const snapshot = async (trx: Transaction<DB>) => {
      const infos = await tablesOf(trx, store.dialect);
      const counted: BackupTable[] = [];
      for (const t of infos) {
        const n = await sql<{ n: number }>`select count(*) as n from ${sql.table(t.name)}`.execute(trx);
        counted.push({ name: t.name, columns: t.columns, binary: t.binary, rows: Number(n.rows[0]?.n ?? 0) });
      }
      const total = counted.reduce((s, t) => s + t.rows, 0);
      const header: BackupHeader = {
        format: BACKUP_FORMAT,
        version: BACKUP_VERSION,
        created_at: new Date().toISOString(),
        engine: store.dialect,
        app_version: opts.appVersion,
        migrations: await appliedMigrations(trx),
        tables: counted,
      };
      await writer.write(header);
      opts.onProgress?.(0, total, '');
      for (const t of infos) {
        await writer.write({ table: t.name });
        let n = 0;
        for await (const batch of readTable(trx, store.dialect, t)) {
          for (const row of batch) await writer.write(row.map(encode));
          n += batch.length;
          rows += batch.length;
          opts.onProgress?.(rows, total, t.name);
        }
        await writer.write({ end_table: t.name, rows: n });
        tables += 1;
      }
      await writer.write({ end: true, tables, rows });
    };
    if (store.dialect === 'postgres') {
      await store.db.transaction().setIsolationLevel('repeatable read').setAccessMode('read only').execute(snapshot);
    } else {
      await store.db.transaction().execute(snapshot);
    }
    await writer.close();
    fs.renameSync(tmp, target);
  } catch (e) {
    writer.destroy();
    fs.rmSync(tmp, { force: true });
    throw e;
  }
  return { file: target, bytes: fs.statSync(target).size, tables, rows, ms: Date.now() - t0 };
}

/** The lines of a gzip'd file, one parsed JSON value at a time; anything unreadable is a corrupt backup. */
async function* readLines(file: string): AsyncGenerator<unknown> {
  const input = fs.createReadStream(file).pipe(createGunzip());
  let rest = '';
  let lineNo = 0;
  const parse = (line: string) => {
    lineNo += 1;
    try {
      return JSON.parse(line) as unknown;
    } catch {
      throw backupError(`${file} is not a Context Vault backup (line ${lineNo} is not JSON)`);
    }
  };
  try {
    for await (const chunk of input) {
      rest += (chunk as Buffer).toString('utf8');
      let nl = rest.indexOf('\n');
      while (nl >= 0) {
        const line = rest.slice(0, nl);
        rest = rest.slice(nl + 1);
        yield parse(line);
        nl = rest.indexOf('\n');
      }
    }
  } catch (e) {
    if (e instanceof ServiceError) throw e;
    throw backupError(`${file} is not a readable Context Vault backup (${(e as Error).message})`);
  }
  if (rest.length > 0) yield parse(rest);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Reads and checks a backup's header only (format, version). */
export async function readBackupHeader(file: string): Promise<BackupHeader> {
  if (!fs.existsSync(file) || !fs.statSync(file).isFile()) throw backupError(`No backup file at ${file}`);
  for await (const first of readLines(file)) return checkHeader(file, first);
  throw backupError(`${file} is empty`);
}

function checkHeader(file: string, v: unknown): BackupHeader {
  if (!isObject(v) || v.format !== BACKUP_FORMAT || !Array.isArray(v.tables) || !Array.isArray(v.migrations)) {
    throw backupError(`${file} is not a Context Vault backup (no backup header)`);
  }
  if (v.version !== BACKUP_VERSION) throw backupError(`${file} is a backup of format version ${String(v.version)}; this version reads ${BACKUP_VERSION}`);
  return v as unknown as BackupHeader;
}

export interface RestoreSummary {
  file: string;
  engine: Dialect;
  from_engine: Dialect;
  tables: number;
  rows: number;
  ms: number;
}

/** True when the deployment has no account and no workspace. */
export async function isEmptyDeployment(db: Db): Promise<boolean> {
  const ws = await db.selectFrom('workspaces').select('id').limit(1).executeTakeFirst();
  const pr = await db.selectFrom('principals').select('id').limit(1).executeTakeFirst();
  return !ws && !pr;
}

function decodeRow(t: BackupTable, row: unknown[], binary: boolean[]): unknown[] {
  return row.map((v, i) => (binary[i] && typeof v === 'string' ? Buffer.from(v, 'base64') : v));
}

/**
 * Restores a backup into this (empty, migrated) deployment in one transaction. `beforeCommit`
 * runs inside it after the rows are in (the caller rebuilds what the file leaves out).
 */
export async function restoreBackup(
  store: Store,
  file: string,
  opts: { onProgress?: Progress; beforeCommit?: (trx: Transaction<DB>) => Promise<void> } = {},
): Promise<RestoreSummary> {
  const t0 = Date.now();
  const header = await readBackupHeader(file);
  const here = await appliedMigrations(store.db);
  if (header.migrations.join(',') !== here.join(',')) {
    const theirs = header.migrations.at(-1) ?? 'none';
    const ours = here.at(-1) ?? 'none';
    throw backupError(`The backup's schema (last migration ${theirs}) is not this version's (${ours}): restore with the version that made it, then upgrade`);
  }
  if (!(await isEmptyDeployment(store.db))) {
    throw new ServiceError(409, 'conflict', 'This deployment is not empty (it has accounts or workspaces): restore only into a fresh DATA_DIR or database');
  }
  const total = header.tables.reduce((s, t) => s + Number(t.rows), 0);
  let rows = 0;
  let tables = 0;
  await store.db.transaction().execute(async (trx) => {
    if (!(await isEmptyDeployment(trx))) {
      throw new ServiceError(409, 'conflict', 'This deployment is not empty (it has accounts or workspaces): restore only into a fresh DATA_DIR or database');
    }
    const here = new Map((await tablesOf(trx, store.dialect)).map((t) => [t.name, t]));
    for (const t of header.tables) {
      const mine = here.get(t.name);
      if (!mine) throw backupError(`The backup holds table ${t.name}, which this deployment does not have`);
      const missing = t.columns.filter((c) => !mine.columns.includes(c));
      if (missing.length > 0) throw backupError(`The backup's table ${t.name} has columns this deployment does not: ${missing.join(', ')}`);
    }
    // What a fresh deployment may hold already goes: the backup's rows replace it (children first).
    for (const t of [...header.tables].reverse()) await sql`delete from ${sql.table(t.name)}`.execute(trx);
    opts.onProgress?.(0, total, '');

    let current: BackupTable | null = null;
    let binary: boolean[] = [];
    let inTable = 0;
    let pending: unknown[][] = [];
    let ended = false;
    let first = true;
    const flush = async () => {
      if (!current || pending.length === 0) return;
      const cols = sql.join(current.columns.map((c) => sql.ref(c)));
      const per = Math.max(1, Math.min(BATCH_ROWS, Math.floor(MAX_PARAMS / Math.max(1, current.columns.length))));
      for (let i = 0; i < pending.length; i += per) {
        const values = sql.join(pending.slice(i, i + per).map((r) => sql`(${sql.join(r)})`));
        await sql`insert into ${sql.table(current.name)} (${cols}) values ${values}`.execute(trx);
      }
      rows += pending.length;
      pending = [];
      opts.onProgress?.(rows, total, current.name);
    };
    for await (const line of readLines(file)) {
      if (first) {
        first = false;
        continue;
      }
      if (ended) throw backupError(`${file} has data after its end line`);
      if (Array.isArray(line)) {
        if (!current) throw backupError(`${file} is corrupt: a row outside any table`);
        if (line.length !== current.columns.length)
          throw backupError(`${file} is corrupt: a row of ${current.name} has ${line.length} values, not ${current.columns.length}`);
        pending.push(decodeRow(current, line, binary));
        inTable += 1;
        if (pending.length >= BATCH_ROWS) await flush();
        continue;
      }
      if (!isObject(line)) throw backupError(`${file} is corrupt: an unexpected line`);
      if (typeof line.table === 'string') {
        if (current) throw backupError(`${file} is corrupt: table ${line.table} starts inside ${current.name}`);
        const t = header.tables.find((x) => x.name === line.table);
        if (!t) throw backupError(`${file} is corrupt: table ${line.table} is not in its header`);
        current = t;
        binary = t.columns.map((c) => t.binary.includes(c));
        inTable = 0;
      } else if (typeof line.end_table === 'string') {
        if (!current || current.name !== line.end_table || line.rows !== inTable || inTable !== Number(current.rows)) {
          throw backupError(`${file} is corrupt: table ${String(line.end_table)} does not end as its header says`);
        }
        await flush();
        tables += 1;
        current = null;
      } else if (line.end === true) {
        if (current || line.rows !== rows || tables !== header.tables.length) throw backupError(`${file} is corrupt: its end line does not match its content`);
        ended = true;
      } else {
        throw backupError(`${file} is corrupt: an unexpected line`);
      }
    }
    if (!ended) throw backupError(`${file} is truncated (no end line): it was not restored`);
    if (store.dialect === 'postgres') await resetSequences(trx);
    await opts.beforeCommit?.(trx);
  });
  // Fresh statistics for what was just written: without them the planner keeps its empty-table
  // plans (sequential scans) until autovacuum gets round to every table.
  if (store.dialect === 'postgres') await sql`analyze`.execute(store.db);
  return { file: path.resolve(file), engine: store.dialect, from_engine: header.engine, tables, rows, ms: Date.now() - t0 };
}

/** Moves every serial/identity sequence past the ids the restore wrote. */
async function resetSequences(trx: Transaction<DB>): Promise<void> {
  const seqs = (
    await sql<{ table_name: string; column_name: string; seq: string | null }>`select table_name, column_name,
      pg_get_serial_sequence(quote_ident(table_name), column_name) as seq
      from information_schema.columns
      where table_schema = current_schema() and (column_default like 'nextval(%' or is_identity = 'YES')`.execute(trx)
  ).rows;
  for (const s of seqs) {
    if (!s.seq) continue;
    await sql`select setval(${s.seq}, coalesce((select max(${sql.ref(s.column_name)}) from ${sql.table(s.table_name)}), 0) + 1, false)`.execute(trx);
  }
}
