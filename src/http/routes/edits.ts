import { z } from 'zod';
import type { CoreContext } from '../../core/context.js';
import { EditText, PatchText, SectionName } from '../../core/pages/edit-input.js';
import { editOrProposePage, type EditMode } from '../../core/pages/edit-modes.js';
import { CommitMessage, Sha } from '../../core/pages/input.js';
import { proposedView } from '../../presenters/proposals.js';
import { writeResultView } from '../../presenters/pages.js';
import { caller } from '../shared/caller.js';
import { PageRefParams, ProposedSchema, WriteResultSchema } from '../schemas.js';
import { errors, route, type RestApp } from '../shared/schemas.js';

const Common = {
  base_sha: Sha.optional().describe('The content_hash or commit_sha you read: changes since are merged, a clash becomes a proposal (409)'),
  message: CommitMessage,
};

/**
 * Edits in place (issue 13, beyond the spec): REST twins of MCP `context_append`,
 * `context_replace_section` and `context_patch`. Same conditions as PUT /nodes/:id (If-Match or
 * base_sha; a stale edit merges or becomes a proposal; an agent without write proposes, 202).
 */
export async function editRoutes(r: RestApp, ctx: CoreContext): Promise<void> {
  const editRoute = <B extends z.ZodObject>(path: string, summary: string, body: B, mode: (b: z.infer<B>) => EditMode) =>
    r.post(
      path,
      route(['pages'], summary, {
        params: PageRefParams,
        headers: z.object({ 'if-match': z.string().max(200).optional() }),
        body,
        response: { 200: WriteResultSchema, 202: ProposedSchema, ...errors(400, 401, 403, 404, 409, 413) },
      }),
      async (req, reply) => {
        const b = req.body as z.infer<B> & { base_sha?: string; message?: string };
        const ifMatch = req.headers['if-match'];
        const pre = { ifMatch: Array.isArray(ifMatch) ? ifMatch.join(',') : ifMatch, baseSha: b.base_sha };
        const o = await editOrProposePage(ctx, caller(req), req.params.id, mode(b), pre, b.message);
        if ('proposal' in o) return reply.code(202).send({ ...proposedView(o.proposal), proposal: o.proposal });
        return reply.header('ETag', `"${o.record.content_hash}"`).send(writeResultView(o));
      },
    );

  editRoute(
    '/nodes/:id/append',
    'Add text at the end of a page, or at the end of a section',
    z.strictObject({ text: EditText.min(1), section: SectionName.optional(), ...Common }),
    (b) => ({ kind: 'append', text: b.text, section: b.section }),
  );
  editRoute(
    '/nodes/:id/section',
    'Replace what is under a heading (sub-sections included); the heading line stays',
    z.strictObject({ section: SectionName, text: EditText, ...Common }),
    (b) => ({ kind: 'replace_section', section: b.section, text: b.text }),
  );
  editRoute('/nodes/:id/patch', 'Apply a unified diff to a page', z.strictObject({ patch: PatchText, ...Common }), (b) => ({ kind: 'patch', patch: b.patch }));
}
