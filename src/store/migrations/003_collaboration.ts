import type { Kysely } from 'kysely';
import type { Dialect } from '../db.js';
import { createdAt, textId, workspaceFk } from './columns.js';

/** Collaboration: proposals, threads on pages, and each principal's inbox. */
export async function up(db: Kysely<unknown>, _dialect: Dialect): Promise<void> {
  await db.schema
    .createTable('proposals')
    .$call(textId)
    .$call(workspaceFk)
    .addColumn('status', 'text', (c) => c.notNull())
    // edit | create | archive | move | delete
    .addColumn('kind', 'text', (c) => c.notNull())
    // propose | conflict | no_write | step_up
    .addColumn('origin', 'text', (c) => c.notNull())
    .addColumn('page_id', 'text')
    .addColumn('path', 'text', (c) => c.notNull())
    .addColumn('content', 'text')
    .addColumn('base_hash', 'text')
    .addColumn('base_commit', 'text')
    .addColumn('params', 'text', (c) => c.notNull().defaultTo('{}'))
    .addColumn('reason', 'text', (c) => c.notNull().defaultTo(''))
    // The highest level involved (page and proposed content): who may see the proposal.
    .addColumn('sensitivity', 'text', (c) => c.notNull())
    .addColumn('proposer_id', 'text', (c) => c.notNull())
    .$call(createdAt)
    .addColumn('decided_by', 'text')
    .addColumn('decided_at', 'text')
    .addColumn('decision_reason', 'text')
    .addColumn('result_commit', 'text')
    .addColumn('superseded_by', 'text')
    .execute();
  await db.schema.createIndex('proposals_ws_status').on('proposals').columns(['workspace_id', 'status']).execute();
  await db.schema.createIndex('proposals_page').on('proposals').columns(['workspace_id', 'page_id']).execute();

  await db.schema
    .createTable('thread_messages')
    .$call(textId)
    .$call(workspaceFk)
    .addColumn('page_id', 'text', (c) => c.notNull())
    .addColumn('seq', 'integer', (c) => c.notNull())
    .addColumn('author_id', 'text', (c) => c.notNull())
    .addColumn('author_kind', 'text', (c) => c.notNull())
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('body', 'text', (c) => c.notNull())
    .addColumn('reply_to', 'text')
    .addColumn('mentions', 'text', (c) => c.notNull().defaultTo('[]'))
    .$call(createdAt)
    .addUniqueConstraint('thread_messages_seq', ['page_id', 'seq'])
    .execute();

  await db.schema
    .createTable('threads')
    .addColumn('page_id', 'text', (c) => c.primaryKey())
    .$call(workspaceFk)
    // Consecutive agent-authored messages; the 4th locks the thread.
    .addColumn('agent_hops', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('locked_at', 'text')
    .addColumn('unlocked_by', 'text')
    .addColumn('unlocked_at', 'text')
    .execute();

  await db.schema
    .createTable('thread_reads')
    .addColumn('page_id', 'text', (c) => c.notNull())
    .addColumn('principal_id', 'text', (c) => c.notNull())
    .addColumn('last_seq', 'integer', (c) => c.notNull())
    .addColumn('read_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('thread_reads_pk', ['page_id', 'principal_id'])
    .execute();

  await db.schema
    .createTable('inbox_events')
    .$call(workspaceFk)
    .addColumn('principal_id', 'text', (c) => c.notNull())
    .addColumn('seq', 'integer', (c) => c.notNull())
    // mention | reply | proposal | conflict
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('state', 'text', (c) => c.notNull())
    .addColumn('page_id', 'text')
    .addColumn('proposal_id', 'text')
    .addColumn('payload', 'text', (c) => c.notNull())
    .$call(createdAt)
    .addColumn('read_at', 'text')
    .addColumn('done_at', 'text')
    .addPrimaryKeyConstraint('inbox_events_pk', ['workspace_id', 'principal_id', 'seq'])
    .execute();
}
