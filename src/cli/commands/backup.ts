import { parseArgs, required } from '../args.js';
import type { Command } from '../command.js';
import { openDeployment } from '../context.js';
import { emit, ProgressBar } from '../output.js';
import { rebuildKeywordIndexes } from '../../retrieval/reindex-pages.js';
import { restoreBackup, writeBackup } from '../../store/backup.js';
import { VERSION } from '../../version.js';

function mb(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

export const backup: Command = {
  name: 'backup',
  summary: 'write a consistent backup of the whole deployment to a file',
  usage: '--out FILE [--force] [--json]',
  help: [
    'Every account, workspace, page, version (git objects), key, audit entry and index row, read in',
    'one snapshot while the service keeps running, into one gzip file (a portable format: a SQLite',
    'backup restores into PostgreSQL and back). --force replaces an existing FILE.',
    'Example: context-vault backup --out /backups/vault-$(date +%F).cvbak',
  ],
  flags: { out: 'string', force: 'boolean', json: 'boolean' },
  async run(argv) {
    const args = parseArgs(argv, this.flags);
    const out = required(args, 'out');
    const d = await openDeployment();
    const bar = new ProgressBar('backup');
    try {
      const r = await writeBackup(d.ctx.store, out, {
        appVersion: VERSION,
        overwrite: args.booleans.has('force'),
        onProgress: (done, total, table) => bar.update(done, total, table),
      });
      bar.end();
      emit(
        args.booleans.has('json'),
        { ...r, engine: d.ctx.store.dialect },
        `backup written: ${r.file} (${mb(r.bytes)}, ${r.rows} rows in ${r.tables} tables, ${r.ms} ms)`,
      );
      return 0;
    } finally {
      bar.end();
      await d.close();
    }
  },
};

export const restore: Command = {
  name: 'restore',
  summary: 'restore a backup into an empty deployment',
  usage: '--from FILE [--json]',
  help: [
    'Loads a backup into the deployment the environment names (DATA_DIR or DATABASE_URL), which',
    'must be empty (no account, no workspace): it never overwrites one in use. Everything goes in',
    'one transaction: a corrupt or truncated file leaves the deployment as it was. The schema must',
    "be the backup's (restore with the version that wrote it, then upgrade). Stop the service first.",
    'Example: DATA_DIR=/srv/vault-new context-vault restore --from /backups/vault-2026-01-31.cvbak',
  ],
  flags: { from: 'string', json: 'boolean' },
  async run(argv) {
    const args = parseArgs(argv, this.flags);
    const from = required(args, 'from');
    const d = await openDeployment();
    const bar = new ProgressBar('restore');
    try {
      const r = await restoreBackup(d.ctx.store, from, {
        onProgress: (done, total, table) => bar.update(done, total, table),
        beforeCommit: (trx) => rebuildKeywordIndexes(trx),
      });
      bar.end();
      emit(args.booleans.has('json'), r, `restored ${r.rows} rows in ${r.tables} tables from ${r.file} (${r.from_engine} → ${r.engine}, ${r.ms} ms)`);
      return 0;
    } finally {
      bar.end();
      await d.close();
    }
  },
};
