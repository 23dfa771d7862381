import { z } from 'zod';
import type { CoreContext } from '../../core/context.js';
import { acceptInvite, createInvite, INVITE_DEFAULT_DAYS, INVITE_MAX_DAYS, listInvites, revokeInvite } from '../../core/invites.js';
import { changeRole, listMembers, removeMember } from '../../core/members.js';
import { createWorkspaceFor, listWorkspaces } from '../../core/workspaces.js';
import { ROLES } from '../../policy/principal.js';
import { RecordId, Timestamp } from '../schemas.js';
import { caller } from '../shared/caller.js';
import { errors, optionalBody, route, type RestApp } from '../shared/schemas.js';

const Role = z.enum(ROLES);
/** Workspace names: the slug is derived from it. No control characters. */
const WorkspaceName = z
  .string()
  .trim()
  .min(1)
  .max(100)
  .regex(/^[^\u0000-\u001f\u007f]*$/, 'must not contain control characters');

const WorkspaceSchema = z.object({
  id: z.string(),
  slug: z.string(),
  name: z.string(),
  role: Role.nullable().describe('Your role there; null for an agent (agents act through grants)'),
  current: z.boolean().describe('The workspace this request works in'),
  created_at: Timestamp,
});

const MemberSchema = z.object({
  id: z.string(),
  name: z.string(),
  email: z.string().nullable(),
  role: Role,
  joined_at: Timestamp,
});

const InviteSchema = z.object({
  id: z.string(),
  role: Role,
  email: z.string().nullable().describe('When set, only the account with this email can accept'),
  hint: z.string().describe('`iv_…` and the last four characters of the token; the token itself is never listed'),
  state: z.enum(['pending', 'accepted', 'revoked', 'expired']),
  created_by: z.string(),
  created_at: Timestamp,
  expires_at: Timestamp,
  revoked_at: Timestamp.nullable(),
  accepted_at: Timestamp.nullable(),
  accepted_by: z.string().nullable(),
});

const NewInviteSchema = InviteSchema.extend({
  token: z.string().describe('iv_… — shown once'),
  accept_url: z.string().describe('`<PUBLIC_URL>/invite/<token>`; no mail is sent'),
});

const InviteBody = z.strictObject({
  role: Role,
  email: z.email().max(254).nullable().optional(),
  expires_in_days: z.number().int().min(1).max(INVITE_MAX_DAYS).default(INVITE_DEFAULT_DAYS),
});

/** The two forms of every members and invites route: the current workspace, and `/workspaces/:ws/…`. */
const FORMS = [
  { base: '', where: 'the current workspace' },
  { base: '/workspaces/:ws', where: ':ws (id or slug)' },
] as const;

function wsOf(params: unknown): string | undefined {
  const ws = (params as { ws?: unknown }).ws;
  return typeof ws === 'string' ? ws : undefined;
}

export async function workspaceRoutes(r: RestApp, ctx: CoreContext): Promise<void> {
  r.get(
    '/workspaces',
    route(['workspaces'], 'Workspaces you belong to, with your role; an agent sees its one workspace', {
      response: { 200: z.object({ workspaces: z.array(WorkspaceSchema) }), ...errors(401) },
    }),
    async (req) => ({ workspaces: await listWorkspaces(ctx, caller(req)) }),
  );

  r.post(
    '/workspaces',
    route(
      ['workspaces'],
      'Create a workspace (humans only); you become its owner, the slug comes from the name',
      {
        body: z.strictObject({ name: WorkspaceName }),
        response: { 201: WorkspaceSchema, ...errors(400, 401, 403) },
      },
      { auth: 'session' },
    ),
    async (req, reply) => reply.code(201).send(await createWorkspaceFor(ctx, caller(req), req.body.name)),
  );

  for (const { base, where } of FORMS) {
    const wsParam = base.includes(':ws') ? { ws: RecordId } : {};

    r.get(
      `${base}/members`,
      route(
        ['members'],
        `Members of ${where}`,
        {
          params: z.object(wsParam),
          response: { 200: z.object({ members: z.array(MemberSchema) }), ...errors(401, 403, 404) },
        },
        { auth: 'session' },
      ),
      async (req) => ({ members: await listMembers(ctx, caller(req), wsOf(req.params)) }),
    );

    r.patch(
      `${base}/members/:id`,
      route(
        ['members'],
        `Change a member's role in ${where} (owner); the last owner cannot be demoted`,
        {
          params: z.object({ ...wsParam, id: RecordId }),
          body: z.strictObject({ role: Role }),
          response: { 200: MemberSchema, ...errors(400, 401, 403, 404, 409) },
        },
        { auth: 'session' },
      ),
      async (req) => changeRole(ctx, caller(req), wsOf(req.params), req.params.id, req.body.role),
    );

    r.delete(
      `${base}/members/:id`,
      route(
        ['members'],
        `Remove a member from ${where} (owner), or leave it (your own id); the last owner cannot leave`,
        {
          params: z.object({ ...wsParam, id: RecordId }),
          response: {
            200: z.object({ removed: z.literal(true), id: z.string(), workspace_id: z.string(), left: z.boolean() }),
            ...errors(401, 403, 404, 409),
          },
        },
        { auth: 'session' },
      ),
      async (req) => ({ removed: true as const, ...(await removeMember(ctx, caller(req), wsOf(req.params), req.params.id)) }),
    );

    r.get(
      `${base}/invites`,
      route(
        ['invites'],
        `Invites of ${where} (owner); hints only, never tokens`,
        {
          params: z.object(wsParam),
          response: { 200: z.object({ invites: z.array(InviteSchema) }), ...errors(401, 403, 404) },
        },
        { auth: 'session' },
      ),
      async (req) => ({ invites: await listInvites(ctx, caller(req), wsOf(req.params)) }),
    );

    r.post(
      `${base}/invites`,
      route(
        ['invites'],
        `Create an invite to ${where} (owner); the token and accept_url are in this answer only, no mail is sent`,
        {
          params: z.object(wsParam),
          body: InviteBody,
          response: { 201: NewInviteSchema, ...errors(400, 401, 403, 404, 409) },
        },
        { auth: 'session' },
      ),
      async (req, reply) => reply.code(201).send(await createInvite(ctx, caller(req), wsOf(req.params), req.body)),
    );

    r.delete(
      `${base}/invites/:id`,
      route(
        ['invites'],
        `Revoke an invite of ${where} (owner)`,
        {
          params: z.object({ ...wsParam, id: RecordId }),
          response: { 200: InviteSchema, ...errors(401, 403, 404, 409) },
        },
        { auth: 'session' },
      ),
      async (req) => revokeInvite(ctx, caller(req), wsOf(req.params), req.params.id),
    );
  }

  r.post(
    '/invites/:token/accept',
    route(
      ['invites'],
      'Accept an invite: join its workspace with its role (needs X-CSRF-Token)',
      {
        params: z.object({ token: z.string().min(1).max(200) }),
        body: optionalBody(z.strictObject({})),
        response: {
          200: z.object({ workspace: z.object({ id: z.string(), slug: z.string(), name: z.string() }), role: Role }),
          ...errors(401, 403, 404, 409, 410),
        },
      },
      { auth: 'session' },
    ),
    async (req) => acceptInvite(ctx, caller(req), req.params.token),
  );
}
