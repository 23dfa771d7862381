import type { Selectable, Transaction } from 'kysely';
import { ulid } from 'ulid';
import { setFrontmatterFields } from '../markdown/index.js';
import { decideLifecycleRun } from '../policy/lifecycle.js';
import { canReadPage, enforce } from '../policy/pages.js';
import type { Principal } from '../policy/principal.js';
import type { Executor } from '../store/db.js';
import type { DB, LifecycleRunsTable, PagesTable } from '../store/schema.js';
import { afterCommitIfAny, inTransaction } from '../store/tx.js';
import { lifecycleArchived, lifecycleRuns } from '../metrics.js';
import { appendAudit } from './audit.js';
import type { CoreContext } from './context.js';
import { pushEvents } from './inbox-events.js';
import { commitFiles } from './pages/commit.js';
import { analyzeContent } from './pages/content.js';
import { recordPageChange, rowFacts, type PageChange } from './pages/persist.js';
import { parsePagePath } from './paths.js';

/**
 * The lifecycle job (spec §3 "The lifecycle job", §4 Operations): active pages untouched for
 * longer than their folder's `auto_archive_days` are candidates; a run archives them with reason
 * `stale` in one commit and tells the workspace's owners in a `lifecycle_digest` inbox event.
 * Every function takes `now`, so tests (and the scheduler, src/core/lifecycle-job.ts) choose the
 * clock.
 */

/** Pages one run archives at most (one commit, one transaction); the oldest go first, the rest next run. */
export const LIFECYCLE_MAX_PAGES = 1000;
/** Pages a digest event names; the rest are counted. */
export const DIGEST_MAX_PAGES = 200;
const DAY_MS = 86_400_000;

export type LifecycleMode = 'dry' | 'apply';

/** A candidate and why it is one. */
export interface LifecycleCandidate {
  id: string;
  path: string;
  title: string;
  why: {
    /** The last recorded read (null: never read since it was written). */
    last_touched_at: string | null;
    updated_at: string;
    /** Days since the later of the two, one decimal, rounded down. */
    age_days: number;
    /** The folder whose `auto_archive_days` applies (the page's own or the nearest ancestor setting one). */
    folder: string;
    auto_archive_days: number;
    /** The nearest `half_life_days` up the page's path, null when none is set. */
    half_life_days: number | null;
    /** 0.5^(age / half_life_days): the freshness search gives the page now; null without a half-life. */
    half_life_score: number | null;
  };
}

export interface LifecycleRunSummary {
  at: string;
  trigger: 'scheduled' | 'manual';
  mode: LifecycleMode;
  archived: number;
  commit_sha: string | null;
  /** The caller's own digest event of that run (an owner's inbox seq), when it got one. */
  digest_event?: { seq: number };
}

export interface LifecycleReport {
  mode: 'off' | LifecycleMode;
  /** When the scheduler next looks (the next slot's start); null when scheduled runs are off. */
  next_run_at: string | null;
  last_run: LifecycleRunSummary | null;
  /** Candidates the caller may read, oldest first (at most LIFECYCLE_MAX_PAGES). */
  candidates: LifecycleCandidate[];
  /** How many candidates the caller may read in all. */
  total: number;
}

export interface LifecycleRunResult {
  mode: LifecycleMode;
  /** Dry: what an apply would archive now; apply: what was archived. */
  pages: LifecycleCandidate[];
  archived: number;
  commit_sha: string | null;
  /** Candidates left for a later run (over LIFECYCLE_MAX_PAGES). */
  remaining: number;
}

/** Who archives in a scheduled run: the service itself, not any person (git author, audit actor id). */
export const LIFECYCLE_ACTOR = { id: 'lifecycle', name: 'Lifecycle job' } as const;

interface Settings {
  auto: Map<string, number>;
  halfLife: Map<string, number>;
}

async function folderSettings(db: Executor, workspaceId: string): Promise<Settings> {
  const rows = await db
    .selectFrom('folders')
    .select(['path', 'auto_archive_days', 'half_life_days'])
    .where('workspace_id', '=', workspaceId)
    .where((eb) => eb.or([eb('auto_archive_days', 'is not', null), eb('half_life_days', 'is not', null)]))
    .execute();
  const auto = new Map<string, number>();
  const halfLife = new Map<string, number>();
  for (const r of rows) {
    if (r.auto_archive_days !== null) auto.set(r.path, r.auto_archive_days);
    if (r.half_life_days !== null) halfLife.set(r.path, r.half_life_days);
  }
  return { auto, halfLife };
}

/** The nearest folder up a page's folder path (itself first) that has a value in `map`. */
function nearest(map: Map<string, number>, folder: string): { folder: string; days: number } | null {
  for (let c = folder; c.includes('/'); c = c.slice(0, c.lastIndexOf('/'))) {
    const days = map.get(c);
    if (days !== undefined) return { folder: c, days };
  }
  return null;
}

const floor1 = (x: number) => Math.floor(x * 10) / 10;

/**
 * Active pages whose last activity (the later of their last read and last write: a page edited
 * yesterday is not stale because nobody read it) is older than the nearest `auto_archive_days`,
 * oldest first. A read still in the touch buffer counts.
 */
async function stalePages(ctx: CoreContext, db: Executor, workspaceId: string, now: Date): Promise<{ row: PagesTable; candidate: LifecycleCandidate }[]> {
  const settings = await folderSettings(db, workspaceId);
  if (settings.auto.size === 0) return [];
  // No page younger than the shortest setting can be stale: let the database skip them.
  const cutoff = new Date(now.getTime() - Math.min(...settings.auto.values()) * DAY_MS).toISOString();
  const rows = await db
    .selectFrom('pages')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .where('deleted_at', 'is', null)
    .where('state', '=', 'active')
    .where('updated_at', '<', cutoff)
    .where((eb) => eb.or([eb('last_touched_at', 'is', null), eb('last_touched_at', '<', cutoff)]))
    .execute();
  const out: { row: PagesTable; candidate: LifecycleCandidate; ageMs: number }[] = [];
  for (const row of rows) {
    const rule = nearest(settings.auto, row.cluster_path);
    if (!rule) continue;
    const touched = ctx.touches.peek(row.id) ?? row.last_touched_at;
    const last = touched && touched > row.updated_at ? touched : row.updated_at;
    const ageMs = now.getTime() - Date.parse(last);
    if (ageMs <= rule.days * DAY_MS) continue;
    const ageDays = ageMs / DAY_MS;
    const half = nearest(settings.halfLife, row.cluster_path);
    out.push({
      row,
      ageMs,
      candidate: {
        id: row.id,
        path: row.path,
        title: row.title,
        why: {
          last_touched_at: touched,
          updated_at: row.updated_at,
          age_days: floor1(ageDays),
          folder: rule.folder,
          auto_archive_days: rule.days,
          half_life_days: half?.days ?? null,
          half_life_score: half ? Math.round(0.5 ** (ageDays / half.days) * 1e6) / 1e6 : null,
        },
      },
    });
  }
  out.sort((a, b) => b.ageMs - a.ageMs || (a.row.path < b.row.path ? -1 : 1));
  return out.map(({ row, candidate }) => ({ row, candidate }));
}

/** The start of the schedule slot `now` falls in (slots are whole intervals since the epoch). */
export function slotStart(now: Date, intervalS: number): Date {
  const ms = intervalS * 1000;
  return new Date(Math.floor(now.getTime() / ms) * ms);
}

/** The start of the slot after `now`'s. */
export function nextSlotStart(now: Date, intervalS: number): Date {
  return new Date(slotStart(now, intervalS).getTime() + intervalS * 1000);
}

function parseReport(raw: string): { digest_seqs?: Record<string, number> } {
  try {
    const v: unknown = JSON.parse(raw);
    return v && typeof v === 'object' ? (v as { digest_seqs?: Record<string, number> }) : {};
  } catch {
    return {};
  }
}

/**
 * The lifecycle report (spec: GET /api/v1/lifecycle/candidates): the candidates the caller may
 * read with why, the scheduled mode, when the next scheduled run is due and the last run.
 */
export async function lifecycleReport(ctx: CoreContext, p: Principal, now = new Date()): Promise<LifecycleReport> {
  const db = ctx.store.db;
  const { mode, intervalS } = ctx.config.lifecycle;
  const visible = (await stalePages(ctx, db, p.workspaceId, now)).filter((s) => canReadPage(p, rowFacts(s.row)));
  // The scheduler looks at each slot's start (and when a node starts): that is the next run.
  const next = mode === 'off' ? null : nextSlotStart(now, intervalS).toISOString();
  const last = await db
    .selectFrom('lifecycle_runs')
    .selectAll()
    .where('workspace_id', '=', p.workspaceId)
    .where('finished_at', 'is not', null)
    .orderBy('started_at', 'desc')
    .limit(1)
    .executeTakeFirst();
  return {
    mode,
    next_run_at: next,
    last_run: last ? summary(last, p) : null,
    candidates: visible.slice(0, LIFECYCLE_MAX_PAGES).map((s) => s.candidate),
    total: visible.length,
  };
}

function summary(r: Selectable<LifecycleRunsTable>, p: Principal): LifecycleRunSummary {
  const seq = parseReport(r.report).digest_seqs?.[p.id];
  return {
    at: r.finished_at ?? r.started_at,
    trigger: r.trigger,
    mode: r.mode,
    archived: r.archived,
    commit_sha: r.commit_sha,
    ...(typeof seq === 'number' ? { digest_event: { seq } } : {}),
  };
}

/**
 * A run by hand (spec: POST /api/v1/lifecycle/run, owner; step-up for apply). Dry answers what
 * an apply would archive now and changes nothing (not even the run log); apply archives them as
 * a manual run, whatever the scheduled mode is.
 */
export async function runLifecycle(ctx: CoreContext, p: Principal, mode: LifecycleMode, now = new Date()): Promise<LifecycleRunResult> {
  enforce(decideLifecycleRun(p, mode, now));
  if (mode === 'dry') {
    const stale = (await stalePages(ctx, ctx.store.db, p.workspaceId, now)).filter((s) => canReadPage(p, rowFacts(s.row)));
    const pages = stale.slice(0, LIFECYCLE_MAX_PAGES).map((s) => s.candidate);
    lifecycleRuns.inc({ trigger: 'manual', mode });
    return { mode, pages, archived: 0, commit_sha: null, remaining: stale.length - pages.length };
  }
  const done = await runSlot(ctx, p.workspaceId, { slot: `manual:${ulid().toLowerCase()}`, trigger: 'manual', mode, actor: p, now });
  // A fresh manual slot is never taken already.
  return done!;
}

/**
 * One run of a workspace in one transaction: claims `slot` (the unique key of lifecycle_runs:
 * when another node holds it already the run is not ours and null is answered), then for apply
 * archives the stale pages in one commit, audits the run, puts a digest in each owner's inbox and
 * records the report. A failure rolls the claim back with the rest, so the slot can run again.
 */
export async function runSlot(
  ctx: CoreContext,
  workspaceId: string,
  run: { slot: string; trigger: 'scheduled' | 'manual'; mode: LifecycleMode; actor: Principal | null; now: Date },
): Promise<LifecycleRunResult | null> {
  const { now } = run;
  const at = now.toISOString();
  return inTransaction(ctx.store, workspaceId, async (trx) => {
    const claim = await trx
      .insertInto('lifecycle_runs')
      .values({
        workspace_id: workspaceId,
        slot: run.slot,
        trigger: run.trigger,
        mode: run.mode,
        principal_id: run.actor?.id ?? null,
        started_at: at,
        finished_at: null,
      })
      .onConflict((oc) => oc.columns(['workspace_id', 'slot']).doNothing())
      .executeTakeFirst();
    if (Number(claim.numInsertedOrUpdatedRows ?? 0) === 0) return null;
    const stale = await stalePages(ctx, trx, workspaceId, now);
    const todo = stale.slice(0, LIFECYCLE_MAX_PAGES);
    const remaining = stale.length - todo.length;
    let commitSha: string | null = null;
    const digestSeqs: Record<string, number> = {};
    if (run.mode === 'apply' && todo.length > 0) {
      const actor = run.actor ?? (await serviceActor(trx, workspaceId));
      commitSha = await archiveStale(ctx, trx, actor, todo, now);
      Object.assign(digestSeqs, await sendDigests(ctx, trx, workspaceId, { ...run, commitSha, pages: todo.map((s) => s.candidate), remaining }));
    }
    const archived = run.mode === 'apply' ? todo.length : 0;
    // Audited when it acted: an owner's apply, or a scheduled apply that archived (a dry run changes nothing).
    if (run.mode === 'apply' && (archived > 0 || run.trigger === 'manual')) {
      await appendAudit(
        trx,
        workspaceId,
        {
          principalId: run.actor?.id ?? null,
          action: 'lifecycle.run',
          detail: { trigger: run.trigger, slot: run.slot, candidates: stale.length, archived, ...(commitSha ? { commit: commitSha } : {}) },
        },
        now,
      );
    }
    await trx
      .updateTable('lifecycle_runs')
      .set({
        // The injected clock may run ahead of the real one (tests): a run never ends before it began.
        finished_at: new Date(Math.max(Date.now(), now.getTime())).toISOString(),
        archived,
        commit_sha: commitSha,
        report: JSON.stringify({
          pages: todo.map((s) => ({ id: s.row.id, path: s.row.path, folder: s.candidate.why.folder })),
          remaining,
          digest_seqs: digestSeqs,
        }),
      })
      .where('workspace_id', '=', workspaceId)
      .where('slot', '=', run.slot)
      .execute();
    afterCommitIfAny(trx, () => {
      lifecycleRuns.inc({ trigger: run.trigger, mode: run.mode });
      lifecycleArchived.inc(archived);
    });
    return { mode: run.mode, pages: todo.map((s) => s.candidate), archived, commit_sha: commitSha, remaining };
  });
}

/** The principal a scheduled run acts as: the service, with no rights of its own (no policy is asked on its behalf). */
async function serviceActor(trx: Transaction<DB>, workspaceId: string): Promise<Principal> {
  const ws = await trx.selectFrom('workspaces').select('slug').where('id', '=', workspaceId).executeTakeFirstOrThrow();
  return {
    ...LIFECYCLE_ACTOR,
    kind: 'agent',
    workspaceId,
    workspaceSlug: ws.slug,
    role: null,
    grants: [],
    agentCeiling: null,
    keyCeiling: null,
    via: 'key',
    sessionId: null,
    keyId: null,
    stepUpAt: null,
    elevatedUntil: null,
    createdBy: null,
  };
}

/** Archives the pages with reason `stale` as one commit; each page gets its row, index, version, audit entry and watch events. */
async function archiveStale(ctx: CoreContext, trx: Transaction<DB>, actor: Principal, todo: { row: PagesTable }[], now: Date): Promise<string> {
  const changes: PageChange[] = todo.map(({ row }) => {
    const target = parsePagePath(row.path);
    const raw = setFrontmatterFields(row.content, { state: 'archived', archived_reason: 'stale', archived_at: now.toISOString() });
    return { action: 'archive', existing: row, target, content: analyzeContent(raw, target.slug) };
  });
  const n = changes.length;
  const message = `Lifecycle: archive ${n} stale page${n === 1 ? '' : 's'}`;
  const commit = await commitFiles(
    trx,
    actor.workspaceId,
    actor,
    changes.map((c) => ({ path: c.target.path, content: c.content!.raw })),
    message,
    now,
  );
  for (const c of changes) {
    await recordPageChange(ctx, trx, actor, { ...c, message, commit, blobSha: commit.blobs.get(c.target.path) ?? null, at: now });
  }
  return commit.sha;
}

/** One `lifecycle_digest` event per owner naming what the run archived; answers each owner's event seq. */
async function sendDigests(
  ctx: CoreContext,
  trx: Transaction<DB>,
  workspaceId: string,
  d: { slot: string; trigger: 'scheduled' | 'manual'; now: Date; commitSha: string | null; pages: LifecycleCandidate[]; remaining: number },
): Promise<Record<string, number>> {
  const owners = await trx
    .selectFrom('members')
    .innerJoin('principals', 'principals.id', 'members.principal_id')
    .select('members.principal_id')
    .where('members.workspace_id', '=', workspaceId)
    .where('members.role', '=', 'owner')
    .where('principals.deleted_at', 'is', null)
    .execute();
  const payload = {
    run: d.slot,
    trigger: d.trigger,
    commit_sha: d.commitSha,
    archived: d.pages.length,
    // Owners read every page, so the digest names them all (up to a bound).
    pages: d.pages.slice(0, DIGEST_MAX_PAGES).map((c) => ({ id: c.id, path: c.path, title: c.title, folder: c.why.folder, age_days: c.why.age_days })),
    more: Math.max(0, d.pages.length - DIGEST_MAX_PAGES),
    remaining: d.remaining,
  };
  return pushEvents(
    ctx,
    trx,
    workspaceId,
    owners.map((o) => ({ principalId: o.principal_id, kind: 'lifecycle_digest' as const, payload })),
    d.now,
  );
}

export interface ScheduledRun {
  workspaceId: string;
  slot: string;
  result: LifecycleRunResult;
}

/**
 * The scheduled run of `now`'s slot, for every workspace that has not had it (LIFECYCLE_MODE dry
 * or apply; off runs nothing). Several nodes may call it at once: each workspace's slot is
 * claimed by exactly one of them (runSlot). Answers the runs this call made.
 */
export async function runScheduled(ctx: CoreContext, now = new Date()): Promise<ScheduledRun[]> {
  const { mode, intervalS } = ctx.config.lifecycle;
  if (mode === 'off') return [];
  const slot = slotStart(now, intervalS).toISOString();
  const due = await ctx.store.db
    .selectFrom('workspaces')
    .select('id')
    .where(({ not, exists, selectFrom }) =>
      not(
        exists(
          selectFrom('lifecycle_runs').select('slot').whereRef('lifecycle_runs.workspace_id', '=', 'workspaces.id').where('lifecycle_runs.slot', '=', slot),
        ),
      ),
    )
    .orderBy('id')
    .execute();
  const out: ScheduledRun[] = [];
  for (const w of due) {
    const result = await runSlot(ctx, w.id, { slot, trigger: 'scheduled', mode, actor: null, now });
    if (result) out.push({ workspaceId: w.id, slot, result });
  }
  return out;
}
