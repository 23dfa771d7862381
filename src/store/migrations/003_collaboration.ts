import type { Kysely } from 'kysely';
import type { Dialect } from '../db.js';
import { createdAt, optionalText, requiredInteger, requiredText, textId, workspaceFk } from './columns.js';

/** Collaboration: proposals, threads on pages, and each principal's inbox. */
export async function up(db: Kysely<unknown>, _dialect: Dialect): Promise<void> {
  const table = (name: string) => db.schema.createTable(name);
  await table('proposals')
    .$call(textId)
    .$call(workspaceFk)
    // kind: edit | create | archive | move | delete; origin: propose | conflict | no_write | step_up
    .$call(requiredText('status', 'kind', 'origin'))
    .$call(optionalText('page_id'))
    .$call(requiredText('path'))
    .$call(optionalText('content', 'base_hash', 'base_commit'))
    .addColumn('params', 'text', (c) => c.notNull().defaultTo('{}'))
    .addColumn('reason', 'text', (c) => c.notNull().defaultTo(''))
    // The highest level involved (page and proposed content): who may see the proposal.
    .$call(requiredText('sensitivity', 'proposer_id'))
    .$call(createdAt)
    .$call(optionalText('decided_by', 'decided_at', 'decision_reason', 'result_commit', 'superseded_by'))
    .execute();
  await db.schema.createIndex('proposals_ws_status').on('proposals').columns(['workspace_id', 'status']).execute();
  await db.schema.createIndex('proposals_page').on('proposals').columns(['workspace_id', 'page_id']).execute();

  await table('thread_messages')
    .$call(textId)
    .$call(workspaceFk)
    .$call(requiredText('page_id'))
    .$call(requiredInteger('seq'))
    .$call(requiredText('author_id', 'author_kind', 'kind', 'body'))
    .$call(optionalText('reply_to'))
    .addColumn('mentions', 'text', (c) => c.notNull().defaultTo('[]'))
    .$call(createdAt)
    .addUniqueConstraint('thread_messages_seq', ['page_id', 'seq'])
    .execute();

  await table('threads')
    .addColumn('page_id', 'text', (c) => c.primaryKey())
    .$call(workspaceFk)
    // Consecutive agent-authored messages; the 4th locks the thread.
    .addColumn('agent_hops', 'integer', (c) => c.notNull().defaultTo(0))
    .$call(optionalText('locked_at', 'unlocked_by', 'unlocked_at'))
    .execute();

  await table('thread_reads')
    .$call(requiredText('page_id', 'principal_id'))
    .$call(requiredInteger('last_seq'))
    .$call(requiredText('read_at'))
    .addPrimaryKeyConstraint('thread_reads_pk', ['page_id', 'principal_id'])
    .execute();

  await table('inbox_events')
    .$call(workspaceFk)
    .$call(requiredText('principal_id'))
    .$call(requiredInteger('seq'))
    // kind: mention | reply | proposal | conflict
    .$call(requiredText('kind', 'state'))
    .$call(optionalText('page_id', 'proposal_id'))
    .$call(requiredText('payload'))
    .$call(createdAt)
    .$call(optionalText('read_at', 'done_at'))
    .addPrimaryKeyConstraint('inbox_events_pk', ['workspace_id', 'principal_id', 'seq'])
    .execute();
}
