import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';
import { createdAt, mintedToken, principalFk, textId, workspaceFk } from './columns.js';

/** The foundation tables. Columns are portable: text, integer, and a binary type per engine. */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  const binary = dialect === 'postgres' ? 'bytea' : 'blob';

  await db.schema
    .createTable('workspaces')
    .$call(textId)
    .addColumn('slug', 'text', (c) => c.notNull().unique())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('token_epoch', 'integer', (c) => c.notNull().defaultTo(0))
    .$call(createdAt)
    .execute();

  await db.schema
    .createTable('principals')
    .$call(textId)
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('email', 'text', (c) => c.unique())
    .addColumn('password_hash', 'text')
    .addColumn('workspace_id', 'text', (c) => c.references('workspaces.id'))
    .addColumn('created_by', 'text')
    .addColumn('ceiling', 'text')
    .$call(createdAt)
    .addColumn('deleted_at', 'text')
    .execute();
  await db.schema.createIndex('principals_workspace').on('principals').column('workspace_id').execute();

  await db.schema
    .createTable('members')
    .$call(workspaceFk)
    .$call(principalFk)
    .addColumn('role', 'text', (c) => c.notNull())
    .$call(createdAt)
    .addPrimaryKeyConstraint('members_pk', ['workspace_id', 'principal_id'])
    .execute();
  await db.schema.createIndex('members_principal').on('members').column('principal_id').execute();

  await db.schema
    .createTable('sessions')
    .$call(textId)
    .addColumn('token_hash', 'text', (c) => c.notNull().unique())
    .$call(principalFk)
    .$call(workspaceFk)
    .addColumn('csrf_token', 'text', (c) => c.notNull())
    .$call(createdAt)
    .addColumn('last_seen_at', 'text', (c) => c.notNull())
    .addColumn('expires_at', 'text', (c) => c.notNull())
    .addColumn('revoked_at', 'text')
    .addColumn('stepup_at', 'text')
    .execute();
  await db.schema.createIndex('sessions_principal').on('sessions').column('principal_id').execute();

  await db.schema
    .createTable('agent_keys')
    .$call(mintedToken)
    .addColumn('ceiling', 'text')
    .addColumn('ip_pin', 'text')
    .addColumn('expires_at', 'text')
    .addColumn('revoked_at', 'text')
    .addColumn('epoch', 'integer', (c) => c.notNull())
    .$call(createdAt)
    .addColumn('last_used_at', 'text')
    .execute();
  await db.schema.createIndex('agent_keys_principal').on('agent_keys').column('principal_id').execute();

  await db.schema
    .createTable('grants')
    .$call(principalFk)
    .addColumn('position', 'integer', (c) => c.notNull())
    .addColumn('action', 'text', (c) => c.notNull())
    .addColumn('scope', 'text', (c) => c.notNull())
    .addColumn('ceiling', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('grants_pk', ['principal_id', 'position'])
    .execute();

  await db.schema
    .createTable('spaces')
    .$call(workspaceFk)
    .addColumn('id', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('summary', 'text', (c) => c.notNull().defaultTo(''))
    .$call(createdAt)
    .addPrimaryKeyConstraint('spaces_pk', ['workspace_id', 'id'])
    .execute();

  await db.schema
    .createTable('folders')
    .$call(workspaceFk)
    .addColumn('path', 'text', (c) => c.notNull())
    .addColumn('space', 'text', (c) => c.notNull())
    .addColumn('summary', 'text', (c) => c.notNull().defaultTo(''))
    .addColumn('auto_archive_days', 'integer')
    .addColumn('half_life_days', 'integer')
    .addColumn('archived', 'integer', (c) => c.notNull().defaultTo(0))
    .$call(createdAt)
    .addPrimaryKeyConstraint('folders_pk', ['workspace_id', 'path'])
    .execute();

  await db.schema
    .createTable('pages')
    .$call(textId)
    .$call(workspaceFk)
    .addColumn('path', 'text', (c) => c.notNull())
    .addColumn('space', 'text', (c) => c.notNull())
    .addColumn('cluster_path', 'text', (c) => c.notNull())
    .addColumn('title', 'text', (c) => c.notNull())
    .addColumn('content', 'text', (c) => c.notNull())
    .addColumn('content_hash', 'text', (c) => c.notNull())
    .addColumn('commit_sha', 'text', (c) => c.notNull())
    .addColumn('sensitivity', 'text', (c) => c.notNull())
    .addColumn('block_level', 'text')
    .addColumn('state', 'text', (c) => c.notNull())
    .addColumn('frontmatter', 'text', (c) => c.notNull())
    .addColumn('tags', 'text', (c) => c.notNull())
    .addColumn('links', 'text', (c) => c.notNull())
    .$call(createdAt)
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addColumn('last_touched_at', 'text')
    .addColumn('created_by', 'text', (c) => c.notNull())
    .addColumn('updated_by', 'text', (c) => c.notNull())
    .addColumn('deleted_at', 'text')
    .execute();
  // A path names one live page; deleted pages keep their row (history by id) but free the path.
  await db.schema
    .createIndex('pages_live_path')
    .on('pages')
    .columns(['workspace_id', 'path'])
    .unique()
    .where(sql<boolean>`deleted_at is null`)
    .execute();
  await db.schema.createIndex('pages_cluster').on('pages').columns(['workspace_id', 'cluster_path']).execute();

  await db.schema
    .createTable('commits')
    .$call(workspaceFk)
    .addColumn('seq', 'integer', (c) => c.notNull())
    .addColumn('sha', 'text', (c) => c.notNull())
    .addColumn('parent_sha', 'text')
    .addColumn('principal_id', 'text', (c) => c.notNull())
    .addColumn('message', 'text', (c) => c.notNull())
    .$call(createdAt)
    .addPrimaryKeyConstraint('commits_pk', ['workspace_id', 'seq'])
    .addUniqueConstraint('commits_sha', ['workspace_id', 'sha'])
    .execute();

  await db.schema
    .createTable('page_versions')
    .$call(workspaceFk)
    .addColumn('page_id', 'text', (c) => c.notNull())
    .addColumn('commit_seq', 'integer', (c) => c.notNull())
    .addColumn('commit_sha', 'text', (c) => c.notNull())
    .addColumn('path', 'text', (c) => c.notNull())
    .addColumn('blob_sha', 'text')
    .addColumn('action', 'text', (c) => c.notNull())
    .addColumn('sensitivity', 'text', (c) => c.notNull())
    .addColumn('block_level', 'text')
    .addColumn('principal_id', 'text', (c) => c.notNull())
    .addColumn('message', 'text', (c) => c.notNull())
    .$call(createdAt)
    .addPrimaryKeyConstraint('page_versions_pk', ['workspace_id', 'page_id', 'commit_seq'])
    .execute();

  await db.schema
    .createTable('git_objects')
    .$call(workspaceFk)
    .addColumn('sha', 'text', (c) => c.notNull())
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('data', binary, (c) => c.notNull())
    .addColumn('base_sha', 'text')
    .addColumn('depth', 'integer', (c) => c.notNull().defaultTo(0))
    .addPrimaryKeyConstraint('git_objects_pk', ['workspace_id', 'sha'])
    .execute();

  await db.schema
    .createTable('git_refs')
    .$call(workspaceFk)
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('sha', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('git_refs_pk', ['workspace_id', 'name'])
    .execute();

  await db.schema
    .createTable('audit_log')
    .$call(workspaceFk)
    .addColumn('seq', 'integer', (c) => c.notNull())
    .addColumn('at', 'text', (c) => c.notNull())
    .addColumn('principal_id', 'text')
    .addColumn('action', 'text', (c) => c.notNull())
    .addColumn('node_id', 'text')
    .addColumn('detail', 'text', (c) => c.notNull())
    .addColumn('prev_hash', 'text', (c) => c.notNull())
    .addColumn('hash', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('audit_log_pk', ['workspace_id', 'seq'])
    .execute();
}
