import type { Kysely } from 'kysely';
import type { Dialect } from '../db.js';
import { workspaceFk } from './columns.js';

/**
 * Issue 16: the lifecycle job's runs (src/core/lifecycle.ts). A scheduled run owns one slot of
 * the interval (`slot` = the slot's start, ISO); the unique `(workspace_id, slot)` key is the
 * claim: the node whose insert lands runs it, in the same transaction as the archive, so with
 * several nodes on one PostgreSQL database a slot runs exactly once (and a crashed run rolls
 * its claim back with it). A manual run takes `manual:<id>` as its slot.
 *
 * `trigger`: scheduled | manual; `mode`: dry | apply; `principal_id`: who ran a manual run (null
 * for scheduled ones); `report`: JSON with the pages archived (or, dry, that would have been).
 */
export async function up(db: Kysely<unknown>, _dialect: Dialect): Promise<void> {
  await db.schema
    .createTable('lifecycle_runs')
    .$call(workspaceFk)
    .addColumn('slot', 'text', (c) => c.notNull())
    .addColumn('trigger', 'text', (c) => c.notNull())
    .addColumn('mode', 'text', (c) => c.notNull())
    .addColumn('principal_id', 'text')
    .addColumn('started_at', 'text', (c) => c.notNull())
    .addColumn('finished_at', 'text')
    .addColumn('archived', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('commit_sha', 'text')
    .addColumn('report', 'text', (c) => c.notNull().defaultTo('{}'))
    .addPrimaryKeyConstraint('lifecycle_runs_pk', ['workspace_id', 'slot'])
    .execute();
  await db.schema.createIndex('lifecycle_runs_time').on('lifecycle_runs').columns(['workspace_id', 'started_at']).execute();
}
