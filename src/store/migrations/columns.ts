import type { ColumnDataType, CreateTableBuilder } from 'kysely';

/**
 * Columns that many tables of the migrations share, each written once; a migration adds one
 * with `.$call(workspaceFk)`. SQL only, like the migrations: a helper adds exactly the columns
 * it names, in its order, where it is called, so the statement is the one the migration wrote
 * out by hand before. Old migrations use these: never change what one emits (that would change
 * the schema of every new database without a migration); write a new helper instead.
 *
 * A plain column (a type, and `not null` or not) goes in through `required` / `optional` and
 * their text and integer forms, a run of them in one call; a column with anything more (a
 * default, a reference, unique, primary key, a type per engine) is written out with `addColumn`,
 * so what is special about a table stands out.
 */
type Table = CreateTableBuilder<string, string>;

/** `id text primary key` */
export const textId = (t: Table) => t.addColumn('id', 'text', (c) => c.primaryKey());

/** `workspace_id text not null references workspaces(id)`: the workspace the row belongs to. */
export const workspaceFk = (t: Table) => t.addColumn('workspace_id', 'text', (c) => c.notNull().references('workspaces.id'));

/** `principal_id text not null references principals(id)`: the principal the row belongs to. */
export const principalFk = (t: Table) => t.addColumn('principal_id', 'text', (c) => c.notNull().references('principals.id'));

/** `created_at text not null` */
export const createdAt = (t: Table) => t.addColumn('created_at', 'text', (c) => c.notNull());

/** A grant's lifetime: `created_at` and `expires_at` (not null), `revoked_at` (null while it holds). */
export const lifetime = (t: Table) =>
  t
    .$call(createdAt)
    .addColumn('expires_at', 'text', (c) => c.notNull())
    .addColumn('revoked_at', 'text');

/**
 * What every minted secret starts with (agent keys, git tokens): its id, the principal and
 * workspace it is for, its name, the SHA-256 of the token (unique) and the hint shown for it.
 */
export const mintedToken = (t: Table) =>
  t
    .$call(textId)
    .$call(principalFk)
    .$call(workspaceFk)
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('token_hash', 'text', (c) => c.notNull().unique())
    .addColumn('hint', 'text', (c) => c.notNull());

/** `deleted_at text`: null while the row is live; a deleted row stays (history), marked. */
export const deletedAt = (t: Table) => t.addColumn('deleted_at', 'text');

/** `name <type> not null`, for each name, in the order given. */
export const required =
  (type: ColumnDataType, ...names: string[]) =>
  (t: Table) =>
    names.reduce((b, name) => b.addColumn(name, type, (c) => c.notNull()), t);

/** `name <type>` (null allowed), for each name, in the order given. */
export const optional =
  (type: ColumnDataType, ...names: string[]) =>
  (t: Table) =>
    names.reduce((b, name) => b.addColumn(name, type), t);

/** `name text not null`, for each name, in the order given. */
export const requiredText = (...names: string[]) => required('text', ...names);

/** `name text` (null allowed), for each name, in the order given. */
export const optionalText = (...names: string[]) => optional('text', ...names);

/** `name integer not null`, for each name, in the order given. */
export const requiredInteger = (...names: string[]) => required('integer', ...names);

/** `name integer` (null allowed), for each name, in the order given. */
export const optionalInteger = (...names: string[]) => optional('integer', ...names);
