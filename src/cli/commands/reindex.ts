import { parseArgs } from '../args.js';
import type { Command } from '../command.js';
import { openDeployment } from '../context.js';
import { emit, ProgressBar } from '../output.js';
import { requireWorkspace } from '../../core/workspaces.js';
import { reindexPages } from '../../retrieval/reindex-pages.js';

export const reindex: Command = {
  name: 'reindex',
  summary: 'rebuild the search index of every page (or one workspace), with progress',
  usage: '[--workspace SLUG] [--json]',
  help: [
    'Re-indexes pages from their stored content: sections, keyword index, links, tags, and a place',
    "in the embedding queue (vectors are computed by the running service's worker). Batches are",
    "small transactions, each replacing its pages' index rows at once: search stays complete and",
    'the service may keep running. A progress bar shows on a terminal.',
    'Example: context-vault reindex --workspace ada',
  ],
  flags: { workspace: 'string', json: 'boolean' },
  async run(argv) {
    const args = parseArgs(argv, this.flags);
    const d = await openDeployment();
    const bar = new ProgressBar('reindex');
    try {
      const only = args.strings.get('workspace');
      const ws = only ? await requireWorkspace(d.ctx.store.db, only) : undefined;
      const t0 = Date.now();
      const r = await reindexPages(d.ctx.store, { workspaceId: ws?.id, onProgress: (done, total) => bar.update(done, total, 'pages') });
      bar.end();
      const ms = Date.now() - t0;
      emit(
        args.booleans.has('json'),
        { pages: r.pages, workspace: ws?.slug ?? null, ms },
        `reindexed ${r.pages} page(s)${ws ? ` of ${ws.slug}` : ''} in ${ms} ms`,
      );
      return 0;
    } finally {
      bar.end();
      await d.close();
    }
  },
};
