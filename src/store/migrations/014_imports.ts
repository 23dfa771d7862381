import type { Kysely } from 'kysely';
import type { Dialect } from '../db.js';
import { createdAt, principalFk, textId, workspaceFk } from './columns.js';

/**
 * Issue 16: zip and JSON imports (src/core/import/). An accepted import is a job: its row, and
 * its files staged in `import_files` in the same transaction as the row, so an import the
 * service has answered for survives a crash and is finished by whichever node next claims it.
 *
 * `import_jobs.status`: queued | running | done | failed. `done` counts staged files applied
 * (each batch deletes its staged rows and raises `done` in the batch's own transaction, so a
 * batch is applied exactly once). `report`: JSON `{created, updated, unchanged, skipped[],
 * renamed[], commits[]}`. `claimed_by` / `claimed_until`: the lease of the node running it.
 *
 * `via`, `key_id`, `key_ceiling`: the credential the import was made with: a job run later acts
 * with the importer's rights then, capped by that credential, and stops if the key is revoked.
 *
 * `import_files`: one row per file still to apply, in order (`ord`), with its page path and
 * its content as uploaded (UTF-8 checked).
 */
export async function up(db: Kysely<unknown>, _dialect: Dialect): Promise<void> {
  await db.schema
    .createTable('import_jobs')
    .$call(textId)
    .$call(workspaceFk)
    .$call(principalFk)
    .addColumn('via', 'text', (c) => c.notNull())
    .addColumn('key_id', 'text')
    .addColumn('key_ceiling', 'text')
    .addColumn('space', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('total', 'integer', (c) => c.notNull())
    .addColumn('done', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('report', 'text', (c) => c.notNull().defaultTo('{}'))
    .addColumn('error', 'text')
    .$call(createdAt)
    .addColumn('started_at', 'text')
    .addColumn('finished_at', 'text')
    .addColumn('claimed_by', 'text')
    .addColumn('claimed_until', 'text')
    .execute();
  await db.schema.createIndex('import_jobs_queue').on('import_jobs').columns(['status', 'created_at']).execute();
  await db.schema.createIndex('import_jobs_workspace').on('import_jobs').columns(['workspace_id', 'created_at']).execute();
  await db.schema
    .createTable('import_files')
    .addColumn('job_id', 'text', (c) => c.notNull().references('import_jobs.id').onDelete('cascade'))
    .addColumn('ord', 'integer', (c) => c.notNull())
    .addColumn('path', 'text', (c) => c.notNull())
    .addColumn('content', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('import_files_pk', ['job_id', 'ord'])
    .execute();
}
