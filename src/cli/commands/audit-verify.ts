import { parseArgs } from '../args.js';
import type { Command } from '../command.js';
import { openDeployment } from '../context.js';
import { emit } from '../output.js';
import { walkAuditChain } from '../../core/audit.js';
import { requireWorkspace } from '../../core/workspaces.js';

export const auditVerify: Command = {
  name: 'audit-verify',
  summary: 'walk the audit hash chains; exit 1 naming the first broken link',
  usage: '[--workspace SLUG] [--json]',
  help: [
    "Checks every workspace's audit chain (or one): each entry's hash must follow from the one",
    'before it. Exit 0 when every chain is intact; exit 1 naming, per broken chain, the first entry',
    '(seq, time, action) whose link does not hold.',
    'Example: context-vault audit-verify --workspace ada',
  ],
  flags: { workspace: 'string', json: 'boolean' },
  async run(argv) {
    const args = parseArgs(argv, this.flags);
    const d = await openDeployment();
    try {
      const db = d.ctx.store.db;
      const only = args.strings.get('workspace');
      const workspaces = only ? [await requireWorkspace(db, only)] : await db.selectFrom('workspaces').select(['id', 'slug']).orderBy('slug').execute();
      const results = [];
      for (const ws of workspaces) {
        const r = await walkAuditChain(db, ws.id);
        results.push({ workspace: ws.slug, entries: r.entries, ok: r.firstBroken === null, first_broken: r.firstBroken });
      }
      const broken = results.filter((r) => !r.ok);
      const text = results
        .map((r) =>
          r.first_broken
            ? `BROKEN ${r.workspace}: first broken link at seq ${r.first_broken.seq} (${r.first_broken.action}, ${r.first_broken.at}); ${r.entries} entries`
            : `ok     ${r.workspace}: ${r.entries} entries`,
        )
        .concat(broken.length > 0 ? [`${broken.length} of ${results.length} chain(s) broken`] : [`${results.length} chain(s) intact`])
        .join('\n');
      emit(args.booleans.has('json'), { ok: broken.length === 0, workspaces: results }, text);
      return broken.length > 0 ? 1 : 0;
    } finally {
      await d.close();
    }
  },
};
