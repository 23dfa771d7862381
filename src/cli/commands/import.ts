import fs from 'node:fs';
import path from 'node:path';
import { parseArgs, required, UsageError } from '../args.js';
import type { Command } from '../command.js';
import { openDeployment, operatorActor } from '../context.js';
import { emit, ProgressBar } from '../output.js';
import { acceptUpload, getImport, IMPORT_LIMITS, importRunner, type ImportUpload } from '../../core/import/index.js';
import { auditOperatorImport, workspaceOwner } from '../../core/operator.js';
import { requireWorkspace } from '../../core/workspaces.js';

/**
 * The files of a folder on disk, by path relative to it. Symbolic links and other non-files are
 * reported, never followed (a link could reach anywhere on the operator's disk); sizes are
 * checked before a file is read.
 */
function readFolder(root: string): { files: { path: string; content: Buffer }[]; skipped: { path: string; reason: string }[] } {
  const files: { path: string; content: Buffer }[] = [];
  const skipped: { path: string; reason: string }[] = [];
  const walk = (dir: string, rel: string) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const relPath = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) {
        if (!e.name.startsWith('.')) walk(path.join(dir, e.name), relPath);
      } else if (e.isSymbolicLink()) skipped.push({ path: relPath, reason: 'a symbolic link' });
      else if (!e.isFile()) skipped.push({ path: relPath, reason: 'not a regular file' });
      else if (!/\.(md|markdown)$/i.test(e.name)) skipped.push({ path: relPath, reason: 'not a markdown file (.md or .markdown)' });
      else if (fs.statSync(path.join(dir, e.name)).size > IMPORT_LIMITS.maxFileBytes)
        skipped.push({ path: relPath, reason: `larger than ${IMPORT_LIMITS.maxFileBytes} bytes` });
      else files.push({ path: relPath, content: fs.readFileSync(path.join(dir, e.name)) });
      if (files.length > IMPORT_LIMITS.maxEntries)
        throw new UsageError(`${root} holds more than ${IMPORT_LIMITS.maxEntries} markdown files; import it in parts`);
    }
  };
  walk(root, '');
  return { files, skipped };
}

function readSource(source: string, space: string): ImportUpload {
  let stat: fs.Stats;
  try {
    stat = fs.statSync(source);
  } catch {
    throw new UsageError(`${source}: no such file or folder`);
  }
  if (stat.isDirectory()) return { kind: 'files', space, ...readFolder(source) };
  if (!stat.isFile()) throw new UsageError(`${source} is neither a zip file nor a folder`);
  if (stat.size > IMPORT_LIMITS.maxUploadBytes) throw new UsageError(`${source} is larger than ${IMPORT_LIMITS.maxUploadBytes} bytes (the import limit)`);
  return { kind: 'zip', space, data: fs.readFileSync(source) };
}

export const importCommand: Command = {
  name: 'import',
  summary: 'import a folder or zip of markdown into a Space, with progress',
  usage: '--workspace SLUG --space SPACE --from FOLDER-OR-ZIP [--json]',
  help: [
    'Imports every .md (and .markdown) file of a folder (recursively; hidden folders are left out,',
    'symbolic links and other files are skipped and reported) or of a zip archive into the Space, keeping paths and',
    'frontmatter, exactly as POST /api/v1/import does: the same limits, one commit per batch of',
    `${IMPORT_LIMITS.batchFiles} files, made as the workspace's earliest owner (audited, with the operator's`,
    'name, as operator.import). The report lists what was skipped and why. The service may keep running.',
    'Example: context-vault import --workspace ada --space handbook --from ./handbook-export.zip',
  ],
  flags: { workspace: 'string', space: 'string', from: 'string', json: 'boolean' },
  async run(argv) {
    const args = parseArgs(argv, this.flags);
    const workspace = required(args, 'workspace');
    const space = required(args, 'space');
    const source = required(args, 'from');
    const upload = readSource(source, space);
    const d = await openDeployment();
    const bar = new ProgressBar('import');
    try {
      const ws = await requireWorkspace(d.ctx.store.db, workspace);
      const p = await workspaceOwner(d.ctx, ws);
      const job = await acceptUpload(d.ctx, p, upload);
      await auditOperatorImport(d.ctx, operatorActor(), p, { import: job.id, space: job.space, source: path.basename(source) });
      const running = importRunner(d.ctx).run(job.id, p);
      let finished = false;
      void running.finally(() => (finished = true));
      // A running service may have claimed it first: then follow its progress until it ends.
      for (;;) {
        const now = await getImport(d.ctx, p, job.id);
        bar.update(now.done, now.total, 'files');
        if (now.status === 'done' || now.status === 'failed') break;
        if (finished && (await running) === null && now.status === 'queued') break;
        await new Promise((r) => setTimeout(r, 200));
      }
      await running;
      bar.end();
      const final = await getImport(d.ctx, p, job.id);
      const { report } = final;
      emit(
        args.booleans.has('json'),
        { id: final.id, status: final.status, space: final.space, total: final.total, ...report, error: final.error },
        [
          `import ${final.id} into ${ws.slug}/${final.space}: ${final.status}; ${report.created} created, ${report.updated} updated, ${report.unchanged} unchanged, ${report.skipped_count} skipped, ${report.commits.length} commit(s)`,
          ...report.skipped.map((s) => `  skipped ${s.path}: ${s.reason}`),
          ...(report.skipped_count > report.skipped.length ? [`  … and ${report.skipped_count - report.skipped.length} more skipped`] : []),
          ...(final.error ? [`error: ${final.error}`] : []),
        ].join('\n'),
      );
      return final.status === 'done' ? 0 : 1;
    } finally {
      bar.end();
      await d.close();
    }
  },
};
