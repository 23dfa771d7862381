/**
 * Tokens per MCP result over a scripted agent session (issue 13: "measure tokens per result for
 * a scripted agent session before and after, and report").
 *
 * The service runs in-process over a temp DATA_DIR. An owner seeds a fixed workspace
 * (bench/mcp-session-workspace.ts: two Spaces, 13 pages with headings, links, `::: confidential`
 * blocks, and a thread). Then two agents work over the official MCP SDK client (Streamable HTTP,
 * as a real client would) and one human editor works over REST (MCP takes agent keys only):
 *
 * - Scribe: read, write, search, propose and collab grants, ceiling confidential;
 * - Scout: read, search and propose only, ceiling internal (confidential blocks come redacted);
 * - Dana: a human editor who asks Scribe for a change in a thread and accepts Scout's proposal.
 *
 * For every step: what was called, ok or error (and what issue 13 wants it to be), and the size
 * of what the agent's model gets: the result's text (the text items of a tool result, the
 * messages of a prompt, the contents of a resource, the error message of a JSON-RPC error) in
 * characters and in tokens (src/retrieval/tokens.ts, o200k), `structuredContent` in tokens when
 * the result has one, and the whole JSON-RPC response in bytes and tokens. `initialize` counts
 * its `instructions` as text; `tools/list` counts its whole result (what a client loads into
 * context). Totals per actor and overall; the human's REST steps are listed but not in the MCP
 * totals.
 *
 * Deterministic: fixed content and a fixed script; the embedding backlog is drained before every
 * step, and no bundle reaches its budget (BUNDLE_BUDGET). What the service makes up per run (ids,
 * timestamps, commit shas, the prompt's data boundary, sign-up e-mails) is replaced, before
 * counting, by same-shape stand-ins from a seeded generator (Normalizer), so two runs print the
 * same figures. Timing is reported apart (`timing`). `--dump=DIR` also writes what the model
 * read at each step (normalized) to DIR, to compare the answers of two versions.
 *
 * Standalone: `npx tsx bench/mcp-session.ts` prints one JSON object; `npm run bench` runs it as
 * `mcp_session` through bench/run.ts.
 *
 * Issue 13 figures (text tokens the models read, MCP steps): before 17,825 (results 13,719;
 * tools/list 2,053 per agent; no instructions; 5 steps off what the issue wants); after the
 * orientation and lean-results work 15,218 (results 10,018; tools/list 2,458 per agent, with
 * output schemas; instructions 142 per agent; no step off). The same JSON also travels as
 * `structuredContent` for the tools that declare an outputSchema (4,268 tokens, not in the text totals).
 */
import fs from 'node:fs';
import path from 'node:path';
import { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { loadConfig } from '../src/config.js';
import { TOKENIZER, tokenCount } from '../src/retrieval/tokens.js';
import { startServer, type RunningServer } from '../src/server.js';
import { type Client, createAgentWithKey, type Res, signupHuman } from '../test/support/server.js';
import { rng } from './content.js';
import { CANARY_DECISION, deployRunbookUpdated, EDITOR_ASK, LOG_ENTRY, PAGES, roadmapProposed, SPACES, THREAD_OPENER } from './mcp-session-workspace.js';
import { installCleanupHandlers, log, makeTempDir, removeTempDir, round, runStandalone, SERVICE_ENV } from './util.js';

const PUBLIC_URL = 'https://vault.example.com';

/**
 * Every bundle and prompt asks for more than its scope holds, so nothing is cut at the budget:
 * which section makes the cut would depend on how this run's ids and commit shas tokenize (each
 * section's source line carries them), and a cut bundle's size says little but its budget.
 * The default of `load_project_context` (4000) is above the `eng` Space's whole text too.
 */
const BUNDLE_BUDGET = 4000;

type Outcome = 'ok' | 'error';
type ActorName = 'scribe' | 'scout' | 'dana';

/** One HTTP exchange of an MCP client: the JSON-RPC method sent and the raw answer. */
interface Exchange {
  method: string;
  status: number;
  body: string;
}

/** What a step got back, raw (counted at the end, after every run-made value is known). */
interface RawStep {
  actor: ActorName;
  face: 'mcp' | 'rest';
  step: string;
  method: string;
  tool?: string;
  outcome: Outcome;
  /** What issue 13 asks this step to answer, where it differs from today or is worth watching. */
  wants: Outcome;
  /** What the model reads. */
  text: string;
  /** `structuredContent` as JSON, when the result has one. */
  structured?: string;
  /** The JSON-RPC result (or error) object as JSON; REST: the body. */
  result: string;
  /** Raw response bodies of the step's exchanges. */
  wire: string[];
  ms: number;
}

/** An MCP client that keeps every HTTP answer it gets. */
interface Agent {
  name: ActorName;
  client: McpClient;
  exchanges: Exchange[];
}

function recordingFetch(into: Exchange[]): (url: string | URL, init?: RequestInit) => Promise<Response> {
  return async (url, init) => {
    const res = await fetch(url, init);
    let method = '?';
    if (typeof init?.body === 'string') {
      try {
        const msg = JSON.parse(init.body) as { method?: string };
        method = msg.method ?? '?';
      } catch {
        /* not JSON: left as ? */
      }
    }
    const body = await res.text();
    into.push({ method, status: res.status, body });
    // A fresh Response over the text read: the SDK reads it as it would have.
    return new Response(res.status === 202 || res.status === 204 ? null : body, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

async function connect(base: string, key: string, name: ActorName): Promise<Agent> {
  const exchanges: Exchange[] = [];
  const client = new McpClient({ name: `bench-${name}`, version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), {
    requestInit: { headers: { authorization: `Bearer ${key}` } },
    fetch: recordingFetch(exchanges),
  });
  await client.connect(transport);
  return { name, client, exchanges };
}

/** The JSON-RPC message of an exchange (`result` or `error`), or undefined. */
function rpcBody(e: Exchange | undefined): { result?: unknown; error?: { code: number; message: string } } | undefined {
  if (!e || !e.body) return undefined;
  try {
    return JSON.parse(e.body) as { result?: unknown; error?: { code: number; message: string } };
  } catch {
    return undefined;
  }
}

class Session {
  readonly steps: RawStep[] = [];

  /** `settle` runs before every step: the embedding backlog is drained, so retrieval sees every write. */
  constructor(private readonly settle: () => Promise<unknown>) {}

  /**
   * Runs one MCP step: `run` makes the SDK call and says what the model reads of a success. A
   * JSON-RPC error (thrown by the SDK) is an error step whose text is the error's message as sent.
   */
  async mcp<T>(
    agent: Agent,
    step: string,
    method: string,
    tool: string | undefined,
    wants: Outcome,
    run: () => Promise<{ value: T; text: string; structured?: unknown; isError?: boolean }>,
  ): Promise<T | undefined> {
    await this.settle();
    agent.exchanges.length = 0;
    const t0 = performance.now();
    let value: T | undefined;
    let text: string;
    let structured: string | undefined;
    let outcome: Outcome;
    try {
      const r = await run();
      value = r.value;
      text = r.text;
      structured = r.structured === undefined ? undefined : JSON.stringify(r.structured);
      outcome = r.isError ? 'error' : 'ok';
    } catch (e) {
      const answer = rpcBody(agent.exchanges.find((x) => x.method === method));
      if (!answer?.error) throw e;
      text = answer.error.message;
      outcome = 'error';
    }
    const ms = performance.now() - t0;
    const mine = agent.exchanges.filter((x) => x.method === method);
    const answer = rpcBody(mine[0]);
    const result = JSON.stringify(answer?.result ?? answer?.error ?? null);
    this.steps.push({
      actor: agent.name,
      face: 'mcp',
      step,
      method,
      ...(tool ? { tool } : {}),
      outcome,
      wants,
      text,
      structured,
      result,
      wire: mine.map((x) => x.body),
      ms,
    });
    log(`  ${agent.name}: ${step} → ${outcome}`);
    return value;
  }

  async tool(agent: Agent, step: string, name: string, args: Record<string, unknown>, wants: Outcome = 'ok'): Promise<any> {
    return this.mcp(agent, step, 'tools/call', name, wants, async () => {
      const r = await agent.client.callTool({ name, arguments: args });
      const content = (r.content ?? []) as { type: string; text?: string }[];
      const text = content
        .filter((c) => c.type === 'text')
        .map((c) => c.text ?? '')
        .join('\n');
      let value: unknown = text;
      try {
        value = JSON.parse(text);
      } catch {
        /* markdown or an error text */
      }
      return { value: r.isError ? undefined : value, text, structured: r.structuredContent, isError: r.isError === true };
    });
  }

  async rest(actor: ActorName, step: string, method: string, wants: Outcome, run: () => Promise<Res>): Promise<Res> {
    await this.settle();
    const t0 = performance.now();
    const res = await run();
    const ms = performance.now() - t0;
    const outcome: Outcome = res.status >= 200 && res.status < 300 ? 'ok' : 'error';
    this.steps.push({ actor, face: 'rest', step, method, outcome, wants, text: res.text, result: res.text, wire: [res.text], ms });
    log(`  ${actor}: ${step} → ${res.status}`);
    return res;
  }
}

// ---------------------------------------------------------------------------------------------
// Run-made values → deterministic stand-ins of the same shape
// ---------------------------------------------------------------------------------------------

const CROCKFORD = '0123456789abcdefghjkmnpqrstvwxyz';
const ULID_ID = /\b([a-z]{2})_([0-9a-hjkmnp-tv-z]{26})\b/g;
const ISO_TIME = /\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?Z\b/g;
/** 24 hex digits and more: commit shas, content hashes, the prompt's data boundary. None is in the fixed content. */
const LONG_HEX = /\b[0-9a-f]{24,64}\b/g;
const SHORT_HEX = /\b[0-9a-f]{7,23}\b/g;
const SIGNUP_EMAIL = /\b([a-z]+)-\d+-\d+-\d+@example\.com\b/g;
/** A fixed time for the stand-ins: 2026-03-02T09:30:00.000Z. */
const BASE_MS = Date.UTC(2026, 2, 2, 9, 30, 0);
const TIME_STANDIN = '2026-03-02T09:31:17.482Z';

function encodeTime(ms: number): string {
  let out = '';
  let n = ms;
  for (let i = 0; i < 10; i++) {
    out = CROCKFORD[n % 32]! + out;
    n = Math.floor(n / 32);
  }
  return out;
}

/**
 * Replaces ids (`pg_<ulid>`…), long hex strings (and 7+ digit prefixes of them, as short commit
 * ids), ISO timestamps and sign-up e-mails by stand-ins. Each distinct id or hex string gets one
 * stand-in, assigned in order of first appearance over the session's answers (a fixed script
 * gives a fixed order), so the mapping never depends on what the real values were; every
 * timestamp gets the same one.
 */
class Normalizer {
  private readonly map = new Map<string, string>();
  private readonly hexes: string[] = [];

  constructor(texts: string[]) {
    const r = rng(1313);
    let ids = 0;
    for (const t of texts) {
      // One pass per text in order of position, so a value's rank is where it first shows.
      const found = [
        ...[...t.matchAll(ULID_ID)].map((m) => ({ at: m.index, v: m[0], kind: 'id' as const })),
        ...[...t.matchAll(LONG_HEX)].map((m) => ({ at: m.index, v: m[0], kind: 'hex' as const })),
      ].sort((a, b) => a.at - b.at);
      for (const { v, kind } of found) {
        if (this.map.has(v)) continue;
        if (kind === 'id') {
          let rand = '';
          for (let k = 0; k < 16; k++) rand += CROCKFORD[Math.floor(r() * 32)]!;
          // Ids made in one session share their time prefix, as real ones do.
          this.map.set(v, `${v.slice(0, 3)}${encodeTime(BASE_MS + ids++ * 37)}${rand}`);
        } else {
          let h = '';
          for (let k = 0; k < v.length; k++) h += '0123456789abcdef'[Math.floor(r() * 16)]!;
          this.map.set(v, h);
          this.hexes.push(v);
        }
      }
    }
  }

  apply(s: string): string {
    return (
      s
        .replace(ULID_ID, (m) => this.map.get(m) ?? m)
        // One time for all: two writes in the same millisecond would otherwise change the count of distinct times.
        .replace(ISO_TIME, (m) => (m.includes('.') ? TIME_STANDIN : TIME_STANDIN.replace(/\.\d{3}Z$/, 'Z')))
        .replace(LONG_HEX, (m) => this.map.get(m) ?? m)
        .replace(SHORT_HEX, (m) => {
          // A short commit id: the same prefix of the full one's stand-in.
          const full = this.hexes.find((h) => h.startsWith(m));
          return full ? this.map.get(full)!.slice(0, m.length) : m;
        })
        .replace(SIGNUP_EMAIL, '$1@example.com')
    );
  }
}

// ---------------------------------------------------------------------------------------------
// Figures
// ---------------------------------------------------------------------------------------------

interface StepFigures {
  n: number;
  actor: ActorName;
  face: 'mcp' | 'rest';
  step: string;
  method: string;
  tool?: string;
  outcome: Outcome;
  wants: Outcome;
  text_chars: number;
  text_tokens: number;
  structured_tokens: number | null;
  result_json_tokens: number;
  wire_bytes: number;
  /** Errors: the message the model reads (normalized, at most 300 characters). */
  error_text?: string;
}

interface Totals {
  steps: number;
  ok: number;
  errors: number;
  text_chars: number;
  text_tokens: number;
  structured_tokens: number;
  result_json_tokens: number;
  wire_bytes: number;
}

function sum(steps: StepFigures[]): Totals {
  const t: Totals = { steps: 0, ok: 0, errors: 0, text_chars: 0, text_tokens: 0, structured_tokens: 0, result_json_tokens: 0, wire_bytes: 0 };
  for (const s of steps) {
    t.steps++;
    if (s.outcome === 'ok') t.ok++;
    else t.errors++;
    t.text_chars += s.text_chars;
    t.text_tokens += s.text_tokens;
    t.structured_tokens += s.structured_tokens ?? 0;
    t.result_json_tokens += s.result_json_tokens;
    t.wire_bytes += s.wire_bytes;
  }
  return t;
}

/** Counts every step; with `dumpDir`, also writes what each step's model read (normalized) there, for comparing runs. */
function figures(raw: RawStep[], extraTexts: string[], dumpDir: string | undefined): StepFigures[] {
  const norm = new Normalizer([...raw.flatMap((s) => [s.text, s.structured ?? '', s.result, ...s.wire]), ...extraTexts]);
  if (dumpDir) fs.mkdirSync(dumpDir, { recursive: true });
  return raw.map((s, i) => {
    const text = norm.apply(s.text);
    const structured = s.structured === undefined ? undefined : norm.apply(s.structured);
    if (dumpDir) {
      const name = `${String(i + 1).padStart(2, '0')}-${s.actor}-${s.step.replace(/[^a-z0-9]+/gi, '-').replace(/^-|-$/g, '')}`;
      fs.writeFileSync(path.join(dumpDir, `${name}.txt`), text);
      if (structured !== undefined) fs.writeFileSync(path.join(dumpDir, `${name}.structured.json`), structured);
    }
    const f: StepFigures = {
      n: i + 1,
      actor: s.actor,
      face: s.face,
      step: s.step,
      method: s.method,
      ...(s.tool ? { tool: s.tool } : {}),
      outcome: s.outcome,
      wants: s.wants,
      text_chars: text.length,
      text_tokens: tokenCount(text),
      structured_tokens: structured === undefined ? null : tokenCount(structured),
      result_json_tokens: tokenCount(norm.apply(s.result)),
      wire_bytes: s.wire.reduce((a, w) => a + Buffer.byteLength(norm.apply(w)), 0),
    };
    if (s.outcome === 'error') f.error_text = text.slice(0, 300);
    return f;
  });
}

// ---------------------------------------------------------------------------------------------
// The session
// ---------------------------------------------------------------------------------------------

async function must(res: Res, what: string, status = [200, 201]): Promise<Res> {
  if (!status.includes(res.status)) throw new Error(`${what}: ${res.status} ${res.text.slice(0, 300)}`);
  return res;
}

async function seed(owner: Client): Promise<Map<string, string>> {
  const ids = new Map<string, string>();
  for (const s of SPACES) await must(await owner.post('/api/v1/spaces', s), `create space ${s.id}`);
  for (const p of PAGES) {
    const r = await must(await owner.post('/api/v1/nodes', { path: p.path, content: p.content, message: `Add ${p.path}` }), `create ${p.path}`);
    ids.set(p.path, r.body.id as string);
  }
  await must(await owner.post(`/api/v1/nodes/${ids.get('eng/runbooks/deploy-payments.md')}/threads`, { body: THREAD_OPENER, kind: 'question' }), 'open thread');
  return ids;
}

/** A human named `name` joins the workspace as an editor through an invite (test/support's joinAs names them after the role). */
async function joinAsEditor(owner: Client, slug: string, name: string): Promise<{ client: Client; id: string }> {
  const inv = await must(await owner.post(`/api/v1/workspaces/${slug}/invites`, { role: 'editor' }), 'invite');
  const h = await signupHuman(owner.base, name);
  await must(await h.client.post(`/api/v1/invites/${inv.body.token}/accept`), 'accept invite');
  h.client.workspace = slug;
  return { client: h.client, id: h.id };
}

function promptText(r: { messages: { content: { type: string; text?: string } }[] }): string {
  return r.messages.map((m) => (m.content.type === 'text' ? (m.content.text ?? '') : '')).join('\n');
}

/** initialize (made by connect) and tools/list of a freshly connected agent. */
async function orient(session: Session, agent: Agent, connectMs: number): Promise<void> {
  const init = agent.exchanges.find((x) => x.method === 'initialize');
  const answer = rpcBody(init);
  const instructions = agent.client.getInstructions() ?? '';
  session.steps.push({
    actor: agent.name,
    face: 'mcp',
    step: 'initialize (instructions)',
    method: 'initialize',
    outcome: answer?.result ? 'ok' : 'error',
    wants: 'ok',
    text: instructions,
    result: JSON.stringify(answer?.result ?? answer?.error ?? null),
    wire: init ? [init.body] : [],
    ms: connectMs,
  });
  await session.mcp(agent, 'tools/list', 'tools/list', undefined, 'ok', async () => {
    const r = await agent.client.listTools();
    return { value: r, text: JSON.stringify(r) };
  });
}

export interface McpSessionResult {
  tokenizer: string;
  normalization: string;
  service: { name: string | undefined; version: string | undefined; retrieval_mode: string | null };
  workspace: { spaces: number; pages: number };
  actors: Record<ActorName, string>;
  initialize: { instructions_chars: number; instructions_tokens: number; result_json_tokens: number; has_instructions: boolean };
  tools_list: { tools: number; tokens: number; chars: number };
  steps: StepFigures[];
  totals: {
    per_actor: Record<string, Totals>;
    mcp_all: Totals;
    mcp_results_only: Totals;
    rest_human: Totals;
  };
  /** Steps whose outcome is not what issue 13 asks for. */
  outcome_gaps: { n: number; actor: ActorName; step: string; outcome: Outcome; wants: Outcome }[];
  timing: { total_ms: number; per_step_ms: { n: number; ms: number }[] };
}

export async function benchMcpSession(opts: { dumpDir?: string | undefined } = {}): Promise<McpSessionResult> {
  const t0 = performance.now();
  const dataDir = makeTempDir('mcp-session');
  let server: RunningServer | undefined;
  const agents: Agent[] = [];
  try {
    const config = loadConfig({ ...SERVICE_ENV, PORT: '0', HOST: '127.0.0.1', DATA_DIR: dataDir, PUBLIC_URL });
    server = await startServer(config, { logger: false });
    const base = server.url;
    log('mcp_session: service up in-process; seeding the workspace');

    const olive = await signupHuman(base, 'Olive');
    const owner = olive.client;
    const ids = await seed(owner);
    const scribeKey = await createAgentWithKey(
      owner,
      [{ action: 'read' }, { action: 'write' }, { action: 'search' }, { action: 'propose' }, { action: 'collab' }],
      {
        name: 'Scribe',
      },
    );
    const scoutKey = await createAgentWithKey(
      owner,
      [
        { action: 'read', ceiling: 'internal' },
        { action: 'search', ceiling: 'internal' },
        { action: 'propose', ceiling: 'internal' },
      ],
      { name: 'Scout', ceiling: 'internal' },
    );
    const dana = await joinAsEditor(owner, olive.workspace.slug, 'Dana');

    const running = server;
    const s = new Session(() => running.ctx.retrieval.worker.drain());
    const deploy = 'eng/runbooks/deploy-payments.md';

    // --- Scribe orients itself -------------------------------------------------------------
    let c0 = performance.now();
    const scribe = await connect(base, scribeKey.key, 'scribe');
    agents.push(scribe);
    await orient(s, scribe, performance.now() - c0);
    await s.tool(scribe, 'context_whoami', 'context_whoami', {});
    await s.mcp(scribe, 'resources/read service://index', 'resources/read', undefined, 'ok', async () => {
      const r = await scribe.client.readResource({ uri: 'service://index' });
      return { value: r, text: r.contents.map((c) => ('text' in c ? c.text : '')).join('\n') };
    });
    await s.tool(scribe, 'context_tree (Spaces)', 'context_tree', {});
    await s.tool(scribe, 'context_tree eng depth 2', 'context_tree', { path: 'eng', depth: 2 });
    await s.mcp(scribe, 'prompts/get load_project_context eng', 'prompts/get', 'load_project_context', 'ok', async () => {
      const r = await scribe.client.getPrompt({ name: 'load_project_context', arguments: { project: 'eng' } });
      return { value: r, text: promptText(r) };
    });

    // --- Dana asks Scribe for a change in the runbook's thread (REST) ----------------------
    await s.rest('dana', 'POST thread message mentioning @Scribe', 'POST /api/v1/nodes/:id/threads', 'ok', () =>
      dana.client.post(`/api/v1/nodes/${ids.get(deploy)}/threads`, { body: EDITOR_ASK, kind: 'question', mentions: ['@Scribe'] }),
    );

    // --- Scribe does the work ----------------------------------------------------------------
    const inbox = await s.tool(scribe, 'collab_inbox', 'collab_inbox', {});
    const events = (inbox?.events ?? []) as { seq: number; payload?: { message_id?: string } }[];
    const askEvent = events.find((e) => JSON.stringify(e).includes('flag cohort'));
    await s.tool(scribe, 'context_bundle eng/runbooks', 'context_bundle', {
      intent: 'canary checks and rollback of the payments deploy',
      scope: 'eng/runbooks',
      budget_tokens: BUNDLE_BUDGET,
    });
    const hits = await s.tool(scribe, 'context_search "canary flag cohort"', 'context_search', { query: 'canary flag cohort' });
    // The agent opens the runbook among the hits (the mention named it).
    const runbookHit = (hits?.results as { id: string; path: string }[] | undefined)?.find((h) => h.path === deploy);
    const page = await s.tool(scribe, 'context_get whole page', 'context_get', runbookHit ? { id: runbookHit.id } : { path: deploy });
    await s.tool(scribe, 'context_get section "Steps"', 'context_get', { path: deploy, section: 'Steps' });
    await s.tool(scribe, 'context_write update (base_sha)', 'context_write', {
      path: deploy,
      content: deployRunbookUpdated(),
      base_sha: page?.commit_sha,
      message: 'Canary also watches flag cohorts',
    });
    await s.tool(scribe, 'context_write create', 'context_write', {
      path: 'eng/decisions/2026-03-canary-flag-cohorts.md',
      content: CANARY_DECISION,
      message: 'Decision: canary watches flag cohorts',
    });
    const who = await s.tool(scribe, 'context_whoami (to find Dana)', 'context_whoami', {});
    const danaRef = (who?.mentionable as { id: string; name: string }[] | undefined)?.find((m) => m.name === 'Dana')?.id ?? '@Dana';
    const replyTo = askEvent?.payload?.message_id;
    await s.tool(scribe, 'collab_post answer with mention', 'collab_post', {
      node: deploy,
      body: 'Done: the canary step now checks every flag cohort turned on in the release, and the decision is in eng/decisions/2026-03-canary-flag-cohorts.md.',
      kind: 'answer',
      ...(typeof replyTo === 'string' ? { reply_to: replyTo } : {}),
      mentions: [danaRef],
    });
    const maxSeq = events.reduce((m, e) => Math.max(m, e.seq), 0);
    await s.tool(scribe, 'collab_ack up_to', 'collab_ack', maxSeq > 0 ? { up_to: maxSeq } : { seqs: [] });
    await s.tool(scribe, 'context_log eng', 'context_log', { scope: 'eng', entry: LOG_ENTRY });

    // --- Scout: read, search and propose only ----------------------------------------------
    c0 = performance.now();
    const scout = await connect(base, scoutKey.key, 'scout');
    agents.push(scout);
    await orient(s, scout, performance.now() - c0);
    await s.mcp(scout, 'prompts/get load_project_context product', 'prompts/get', 'load_project_context', 'ok', async () => {
      const r = await scout.client.getPrompt({ name: 'load_project_context', arguments: { project: 'product', budget_tokens: String(BUNDLE_BUDGET) } });
      return { value: r, text: promptText(r) };
    });
    await s.tool(scout, 'context_search "usage billing cap" scope product', 'context_search', { query: 'usage billing cap', scope: 'product' });
    await s.tool(scout, 'context_get pricing (confidential block redacted)', 'context_get', { path: 'product/pricing.md' });
    const roadmap = await s.tool(scout, 'context_get roadmap', 'context_get', { path: 'product/roadmap-2026.md' });
    await s.tool(scout, 'context_write refused (no write grant)', 'context_write', { path: 'product/roadmap-2026.md', content: roadmapProposed() }, 'error');
    await s.tool(scout, 'context_propose (after refusal)', 'context_propose', {
      path: 'product/roadmap-2026.md',
      content: roadmapProposed(),
      base_sha: roadmap?.commit_sha,
      reason: 'Interviews Q1 2026: customers want a monthly cap',
    });
    const found = await s.tool(scout, 'context_search "starter export"', 'context_search', { query: 'starter plan CSV export' });
    const stale = (found?.results as { id: string; path: string }[] | undefined)?.find((h) => h.path === 'product/specs/starter-export.md')?.id;
    await s.tool(scout, 'context_archive by propose-only agent', 'context_archive', {
      id: stale ?? ids.get('product/specs/starter-export.md'),
      reason: 'stale',
    });
    await s.tool(scout, 'context_tree product', 'context_tree', { path: 'product' });

    // --- Dana reviews Scout's proposals (REST) ----------------------------------------------
    const open = await s.rest('dana', 'GET proposals', 'GET /api/v1/proposals', 'ok', () => dana.client.get('/api/v1/proposals'));
    const proposals = ((open.body as { proposals?: { id: string; path: string; kind?: string }[] } | undefined)?.proposals ?? []).filter(
      (p) => p.path === 'product/roadmap-2026.md',
    );
    for (const p of proposals) {
      await s.rest('dana', 'accept the roadmap proposal', 'POST /api/v1/proposals/:id/accept', 'ok', () =>
        dana.client.post(`/api/v1/proposals/${p.id}/accept`, {}),
      );
    }
    await s.tool(scout, 'collab_inbox (proposal outcome)', 'collab_inbox', {});

    // --- Errors an LLM runs into ------------------------------------------------------------
    await s.tool(scribe, 'error: context_search unknown scope', 'context_search', { query: 'deploy', scope: 'engineering' }, 'error');
    await s.tool(scout, 'error: context_bundle unknown scope', 'context_bundle', { intent: 'pricing discounts', scope: 'marketing' }, 'error');
    await s.mcp(scout, 'error: load_project_context unknown project', 'prompts/get', 'load_project_context', 'error', async () => {
      const r = await scout.client.getPrompt({ name: 'load_project_context', arguments: { project: 'marketing' } });
      return { value: r, text: promptText(r) };
    });
    await s.tool(scribe, 'error: context_log unknown scope', 'context_log', { scope: 'engineering', entry: LOG_ENTRY }, 'error');
    await s.tool(scribe, 'error: context_get path without .md', 'context_get', { path: 'eng/runbooks/deploy-payments' }, 'error');
    await s.tool(scribe, 'error: context_search misspelled argument', 'context_search', { qurey: 'rollback' }, 'error');
    await s.tool(scribe, 'error: context_get missing section', 'context_get', { path: deploy, section: 'Roll back' }, 'error');
    await s.tool(
      scribe,
      'numeric string for budget_tokens',
      'context_bundle',
      { intent: 'rollback', scope: 'eng/runbooks', budget_tokens: String(BUNDLE_BUDGET) },
      'ok',
    );

    // Every commit sha of every page, so short commit ids anywhere in the answers normalize too.
    const histories: string[] = [];
    for (const id of ids.values()) histories.push((await owner.get(`/api/v1/nodes/${id}/history`)).text);

    const steps = figures(s.steps, histories, opts.dumpDir);
    const mcpSteps = steps.filter((x) => x.face === 'mcp');
    const restSteps = steps.filter((x) => x.face === 'rest');
    const init = steps.filter((x) => x.method === 'initialize');
    const lists = steps.filter((x) => x.method === 'tools/list');
    const per_actor: Record<string, Totals> = {};
    for (const a of ['scribe', 'scout'] as const) per_actor[a] = sum(mcpSteps.filter((x) => x.actor === a));
    per_actor.dana_rest = sum(restSteps);
    const firstList = s.steps.find((x) => x.method === 'tools/list');
    const toolCount = firstList ? (JSON.parse(firstList.text) as { tools: unknown[] }).tools.length : 0;
    const firstSearch = s.steps.find((x) => x.tool === 'context_search' && x.outcome === 'ok');
    const mode = firstSearch ? ((JSON.parse(firstSearch.text) as { mode_used?: string }).mode_used ?? null) : null;

    return {
      tokenizer: TOKENIZER,
      normalization:
        'ids (xx_<ulid>), hex of 24+ digits (and 7+ digit prefixes of them), ISO timestamps and sign-up e-mails replaced by same-shape stand-ins before counting',
      service: { name: scribe.client.getServerVersion()?.name, version: scribe.client.getServerVersion()?.version, retrieval_mode: mode },
      workspace: { spaces: SPACES.length, pages: PAGES.length },
      actors: {
        scribe: 'agent: read, write, search, propose, collab; ceiling confidential',
        scout: 'agent: read, search, propose; ceiling internal',
        dana: 'human editor over REST (MCP takes agent keys only)',
      },
      initialize: {
        instructions_chars: init[0]?.text_chars ?? 0,
        instructions_tokens: init[0]?.text_tokens ?? 0,
        result_json_tokens: init[0]?.result_json_tokens ?? 0,
        has_instructions: (init[0]?.text_chars ?? 0) > 0,
      },
      tools_list: { tools: toolCount, tokens: lists[0]?.text_tokens ?? 0, chars: lists[0]?.text_chars ?? 0 },
      steps,
      totals: {
        per_actor,
        mcp_all: sum(mcpSteps),
        mcp_results_only: sum(mcpSteps.filter((x) => x.method !== 'initialize' && x.method !== 'tools/list')),
        rest_human: sum(restSteps),
      },
      outcome_gaps: steps.filter((x) => x.outcome !== x.wants).map((x) => ({ n: x.n, actor: x.actor, step: x.step, outcome: x.outcome, wants: x.wants })),
      timing: { total_ms: round(performance.now() - t0, 1), per_step_ms: s.steps.map((x, i) => ({ n: i + 1, ms: round(x.ms, 1) })) },
    };
  } finally {
    for (const a of agents) await a.client.close().catch(() => {});
    if (server) await server.close();
    removeTempDir(dataDir);
  }
}

// Standalone run.
if (process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href) {
  installCleanupHandlers();
  const dump = process.argv.find((a) => a.startsWith('--dump='))?.slice('--dump='.length);
  runStandalone(async () => ({ mcp_session: await benchMcpSession({ dumpDir: dump ? path.resolve(dump) : undefined }) }));
}
