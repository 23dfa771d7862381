import { z } from 'zod';
import type { CoreContext } from '../../core/context.js';
import { elevate, ELEVATION_MAX_MINUTES, GIT_TOKEN_MAX_DAYS, listGitTokens, lockdown, mintGitToken, revokeGitToken } from '../../core/security.js';
import { RecordId, RevokedSchema } from '../schemas.js';
import { caller } from '../shared/caller.js';
import { errors, optionalBody, route, type RestApp } from '../shared/schemas.js';

/** Lockdown, elevations and git tokens: the `+U` acts of the spec. */
export async function securityRoutes(r: RestApp, ctx: CoreContext): Promise<void> {
  r.post(
    '/workspaces/:ws/lockdown',
    route(
      ['identity'],
      'Owner, step-up: every agent key, git token and OAuth token of the workspace dies, pending invites and elevations are revoked, and every other session loses access to this workspace',
      {
        params: z.object({ ws: RecordId }),
        response: {
          200: z.object({
            workspace: z.string(),
            token_epoch: z.number(),
            sessions_dropped: z.number(),
            invites_revoked: z.number(),
            elevations_revoked: z.number(),
          }),
          ...errors(401, 403, 404),
        },
      },
      { auth: 'session' },
    ),
    async (req) => lockdown(ctx, caller(req), req.params.ws),
  );

  r.post(
    '/elevations',
    route(
      ['agents'],
      'Owner, step-up: raise one agent to secret for a bounded time',
      {
        body: z.strictObject({
          agent_id: RecordId,
          minutes: z.number().int().min(1).max(ELEVATION_MAX_MINUTES).default(60),
          reason: z.string().trim().min(1).max(500),
        }),
        response: {
          201: z.object({ id: z.string(), agent_id: z.string(), reason: z.string(), created_at: z.string(), expires_at: z.string() }),
          ...errors(400, 401, 403, 404, 409),
        },
      },
      { auth: 'session' },
    ),
    async (req, reply) => reply.code(201).send(await elevate(ctx, caller(req), req.body)),
  );

  r.post(
    '/me/git-tokens',
    route(
      ['identity'],
      'Step-up: mint your own git token (gt_…, HTTP Basic password on /git only); shown once',
      {
        // No body at all is fine: a token named "git" for the default lifetime.
        body: optionalBody(
          z.strictObject({
            name: z.string().trim().min(1).max(100).default('git'),
            expires_in_days: z.number().int().min(1).max(GIT_TOKEN_MAX_DAYS).default(GIT_TOKEN_MAX_DAYS),
          }),
        ),
        response: {
          201: z.object({ id: z.string(), name: z.string(), hint: z.string(), created_at: z.string(), expires_at: z.string(), token: z.string() }),
          ...errors(400, 401, 403),
        },
      },
      { auth: 'session' },
    ),
    async (req, reply) => reply.code(201).send(await mintGitToken(ctx, caller(req), req.body)),
  );

  const GitTokenListing = z.object({
    id: z.string(),
    name: z.string(),
    hint: z.string(),
    created_at: z.string(),
    expires_at: z.string(),
    revoked_at: z.string().nullable(),
  });
  r.get(
    '/me/git-tokens',
    route(
      ['identity'],
      'Your git tokens in this workspace, newest first (hints only, never the secret)',
      {
        response: { 200: z.object({ items: z.array(GitTokenListing) }), ...errors(401, 403) },
      },
      { auth: 'session' },
    ),
    async (req) => ({ items: await listGitTokens(ctx, caller(req)) }),
  );

  r.delete(
    '/me/git-tokens/:id',
    route(
      ['identity'],
      'Revoke one of your git tokens, immediately (no step-up: revoking only takes reach away)',
      {
        params: z.object({ id: RecordId }),
        response: { 200: RevokedSchema, ...errors(401, 403, 404) },
      },
      { auth: 'session' },
    ),
    async (req) => revokeGitToken(ctx, caller(req), req.params.id),
  );
}
