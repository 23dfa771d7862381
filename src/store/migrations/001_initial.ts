import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';
import {
  createdAt,
  deletedAt,
  mintedToken,
  optionalInteger,
  optionalText,
  principalFk,
  requiredInteger,
  requiredText,
  textId,
  workspaceFk,
} from './columns.js';

/** The foundation tables. Columns are portable: text, integer, and a binary type per engine. */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  const table = (name: string) => db.schema.createTable(name);
  const binary = dialect === 'postgres' ? 'bytea' : 'blob';

  await table('workspaces')
    .$call(textId)
    .addColumn('slug', 'text', (c) => c.notNull().unique())
    .$call(requiredText('name'))
    .addColumn('token_epoch', 'integer', (c) => c.notNull().defaultTo(0))
    .$call(createdAt)
    .execute();

  await table('principals')
    .$call(textId)
    .$call(requiredText('kind', 'name'))
    .addColumn('email', 'text', (c) => c.unique())
    .$call(optionalText('password_hash'))
    .addColumn('workspace_id', 'text', (c) => c.references('workspaces.id'))
    .$call(optionalText('created_by', 'ceiling'))
    .$call(createdAt)
    .$call(deletedAt)
    .execute();
  await db.schema.createIndex('principals_workspace').on('principals').column('workspace_id').execute();

  await table('members')
    .$call(workspaceFk)
    .$call(principalFk)
    .$call(requiredText('role'))
    .$call(createdAt)
    .addPrimaryKeyConstraint('members_pk', ['workspace_id', 'principal_id'])
    .execute();
  await db.schema.createIndex('members_principal').on('members').column('principal_id').execute();

  await table('sessions')
    .$call(textId)
    .addColumn('token_hash', 'text', (c) => c.notNull().unique())
    .$call(principalFk)
    .$call(workspaceFk)
    .$call(requiredText('csrf_token'))
    .$call(createdAt)
    .$call(requiredText('last_seen_at', 'expires_at'))
    .$call(optionalText('revoked_at', 'stepup_at'))
    .execute();
  await db.schema.createIndex('sessions_principal').on('sessions').column('principal_id').execute();

  await table('agent_keys')
    .$call(mintedToken)
    .$call(optionalText('ceiling', 'ip_pin', 'expires_at', 'revoked_at'))
    .$call(requiredInteger('epoch'))
    .$call(createdAt)
    .$call(optionalText('last_used_at'))
    .execute();
  await db.schema.createIndex('agent_keys_principal').on('agent_keys').column('principal_id').execute();

  await table('grants')
    .$call(principalFk)
    .$call(requiredInteger('position'))
    .$call(requiredText('action', 'scope', 'ceiling'))
    .addPrimaryKeyConstraint('grants_pk', ['principal_id', 'position'])
    .execute();

  await table('spaces')
    .$call(workspaceFk)
    .$call(requiredText('id', 'name'))
    .addColumn('summary', 'text', (c) => c.notNull().defaultTo(''))
    .$call(createdAt)
    .addPrimaryKeyConstraint('spaces_pk', ['workspace_id', 'id'])
    .execute();

  await table('folders')
    .$call(workspaceFk)
    .$call(requiredText('path', 'space'))
    .addColumn('summary', 'text', (c) => c.notNull().defaultTo(''))
    .$call(optionalInteger('auto_archive_days', 'half_life_days'))
    .addColumn('archived', 'integer', (c) => c.notNull().defaultTo(0))
    .$call(createdAt)
    .addPrimaryKeyConstraint('folders_pk', ['workspace_id', 'path'])
    .execute();

  await table('pages')
    .$call(textId)
    .$call(workspaceFk)
    .$call(requiredText('path', 'space', 'cluster_path', 'title', 'content', 'content_hash', 'commit_sha', 'sensitivity'))
    .$call(optionalText('block_level'))
    .$call(requiredText('state', 'frontmatter', 'tags', 'links'))
    .$call(createdAt)
    .$call(requiredText('updated_at'))
    .$call(optionalText('last_touched_at'))
    .$call(requiredText('created_by', 'updated_by'))
    .$call(deletedAt)
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

  await table('commits')
    .$call(workspaceFk)
    .$call(requiredInteger('seq'))
    .$call(requiredText('sha'))
    .$call(optionalText('parent_sha'))
    .$call(requiredText('principal_id', 'message'))
    .$call(createdAt)
    .addPrimaryKeyConstraint('commits_pk', ['workspace_id', 'seq'])
    .addUniqueConstraint('commits_sha', ['workspace_id', 'sha'])
    .execute();

  await table('page_versions')
    .$call(workspaceFk)
    .$call(requiredText('page_id'))
    .$call(requiredInteger('commit_seq'))
    .$call(requiredText('commit_sha', 'path'))
    .$call(optionalText('blob_sha'))
    .$call(requiredText('action', 'sensitivity'))
    .$call(optionalText('block_level'))
    .$call(requiredText('principal_id', 'message'))
    .$call(createdAt)
    .addPrimaryKeyConstraint('page_versions_pk', ['workspace_id', 'page_id', 'commit_seq'])
    .execute();

  await table('git_objects')
    .$call(workspaceFk)
    .$call(requiredText('sha', 'type'))
    .addColumn('data', binary, (c) => c.notNull())
    .$call(optionalText('base_sha'))
    .addColumn('depth', 'integer', (c) => c.notNull().defaultTo(0))
    .addPrimaryKeyConstraint('git_objects_pk', ['workspace_id', 'sha'])
    .execute();

  await table('git_refs').$call(workspaceFk).$call(requiredText('name', 'sha')).addPrimaryKeyConstraint('git_refs_pk', ['workspace_id', 'name']).execute();

  await table('audit_log')
    .$call(workspaceFk)
    .$call(requiredInteger('seq'))
    .$call(requiredText('at'))
    .$call(optionalText('principal_id'))
    .$call(requiredText('action'))
    .$call(optionalText('node_id'))
    .$call(requiredText('detail', 'prev_hash', 'hash'))
    .addPrimaryKeyConstraint('audit_log_pk', ['workspace_id', 'seq'])
    .execute();
}
