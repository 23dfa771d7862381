import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { encode } from 'gpt-tokenizer/encoding/o200k_base';
import { testEngines } from '../support/engines.js';
import { waitForVectors } from '../support/embeddings-server.js';
import { createAgentWithKey, joinAs, signupHuman, startTestServer, type Client, type TestServer } from '../support/server.js';
import { call, connectMcp, SPEC_16, type ToolOutcome } from './support.js';

/**
 * Issue 13, "Tests": one scripted session, in order, as two agents and a person would work it
 * over the official SDK client against a started server. Scribe (read, write, search, propose,
 * collab; ceiling confidential) documents a runbook; Scout (read, search, propose; ceiling
 * internal) researches, proposes and watches; Dana, a human editor, writes the Space's index and
 * is mentioned. Each step asserts what the agent's model reads: result shapes, the key parts of
 * error texts, and token figures (o200k). The test ends with a table of tokens per step and a
 * ceiling on the session's total, so a change that bloats results fails here.
 */

/** Beyond the spec, granted by an action (a caller without it is refused). */
const EXTENDED_GRANTED = [
  'context_append',
  'context_replace_section',
  'context_patch',
  'context_move',
  'context_changes',
  'context_history',
  'context_diff',
  'context_get_at',
  'collab_thread',
  'context_proposals',
  'context_withdraw',
  'context_watch',
];
/** Beyond the spec, about the caller's own watches: any caller. */
const EXTENDED_OWN = ['context_unwatch', 'context_watches'];
const EXT = '/mcp?toolset=extended';
const STATUS_LINE = /^(\d+) of (\d+) tokens used; (\d+) sections? from (\d+) pages?$/m;
/**
 * Ceilings on the tokens (o200k) the agents' models read, measured ×1.5 so that a change that
 * bloats what agents read fails here. Measured on both engines (ids and commit shas vary a
 * little per run): the three tool lists loaded (Scribe's /mcp and extended, Scout's extended)
 * 12,288; everything else (instructions, the index resource, every tool result and error) 11.9k–12.1k.
 */
const TOOL_LISTS_CEILING = 18_400;
const RESULTS_CEILING = 18_000;

const DEPLOY = 'eng/runbooks/deploy.md';
const DECISION = 'eng/decisions/canary.md';
const CHECKS = Array.from(
  { length: 14 },
  (_, i) =>
    `- Check ${i + 1}: the payments dashboard shows green for region ${i + 1}, the migration queue of shard ${i + 1} is empty, and nobody holds the release lock.`,
);
const DEPLOY_V1 = [
  '# Deploy payments',
  '',
  'Payments deploys go out every weekday morning from the release branch.',
  '',
  '## Before you start',
  '',
  ...CHECKS,
  '',
  '## Steps',
  '',
  '1. Tag the release.',
  '2. Run the deploy pipeline.',
  '',
  '## Canary',
  '',
  'Send 5% of traffic to the canary for 15 minutes.',
  '',
  '## Rollback',
  '',
  'Revert the release tag and redeploy the previous build; tell #payments.',
  '',
  '## Contacts',
  '',
  'Page the on-call engineer.',
  '',
].join('\n');

/** A one-hunk unified diff replacing one line of `content`, with a line of context on each side. */
function oneLinePatch(path: string, content: string, oldLine: string, newLine: string): string {
  const lines = content.replace(/\n$/, '').split('\n');
  const i = lines.indexOf(oldLine);
  expect(i, `line "${oldLine}" in ${content}`).toBeGreaterThanOrEqual(0);
  const from = Math.max(0, i - 1);
  const to = Math.min(lines.length - 1, i + 1);
  const ctx = (k: number) => ` ${lines[k]}`;
  const body = [...(from < i ? [ctx(from)] : []), `-${oldLine}`, `+${newLine}`, ...(to > i ? [ctx(to)] : [])];
  const n = to - from + 1;
  return [`--- a/${path}`, `+++ b/${path}`, `@@ -${from + 1},${n} +${from + 1},${n} @@`, ...body, ''].join('\n');
}

describe.each(testEngines())('MCP scripted agent session (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let dana: { client: Client; id: string };
  let scribeId: string;
  let scribeKey: string;
  let scribe: McpClient;
  let scribeX: McpClient;
  let scout: McpClient;
  let scoutX: McpClient;
  let bare: McpClient;
  const clients: McpClient[] = [];

  // What the models read, in o200k tokens, per step of the script.
  const tokens = new Map<string, number>();
  let step = '';
  const count = (text: string, what = '') => {
    const n = encode(text).length;
    tokens.set(step, (tokens.get(step) ?? 0) + n);
    // SESSION_TOKENS=calls prints every call's figure, to see which result grew.
    if (process.env.SESSION_TOKENS === 'calls') console.log(`${step.padEnd(14)} ${String(n).padStart(6)} ${what}`);
  };
  const run = async (c: McpClient, name: string, args: Record<string, unknown>): Promise<ToolOutcome> => {
    const r = await call(c, name, args);
    count(r.text, `${name}${r.isError ? ' (error)' : ''}`);
    return r;
  };
  const ok = async (c: McpClient, name: string, args: Record<string, unknown> = {}): Promise<any> => {
    const r = await run(c, name, args);
    expect(r.isError, `${name}: ${r.text}`).toBe(false);
    return r.json ?? r.text;
  };
  const fails = async (c: McpClient, name: string, args: Record<string, unknown>, code: string): Promise<string> => {
    const r = await run(c, name, args);
    expect(r.isError, `${name}: ${r.text}`).toBe(true);
    expect(r.text).toMatch(new RegExp(`^${code}: \\S`));
    return r.text;
  };
  const connect = async (key: string, path = '/mcp') => {
    const c = await connectMcp(s.url, key, path);
    clients.push(c);
    return c;
  };

  // Carried from step to step, as an agent carries what it read.
  let deploy: { id: string; commit_sha: string };
  let deployV1: string;
  let decision: { id: string; commit_sha: string };
  let toWithdraw: string;
  let legacy: { id: string };

  beforeAll(async () => {
    s = await startTestServer(engine);
    const o = await signupHuman(s.url, 'Olive');
    owner = o.client;
    dana = await joinAs(owner, o.workspace.slug, 'editor', 'Dana');
    const all = ['read', 'write', 'search', 'propose', 'collab'].map((action) => ({ action }));
    const sc = await createAgentWithKey(owner, all, { name: 'Scribe' });
    scribeId = sc.id;
    scribeKey = sc.key;
    const internal = ['read', 'search', 'propose'].map((action) => ({ action, ceiling: 'internal' }));
    const st = await createAgentWithKey(owner, internal, { name: 'Scout', ceiling: 'internal' });
    scout = await connect(st.key);
    scoutX = await connect(st.key, EXT);
    // An agent with no grant at all, for step 7.
    bare = await connect((await createAgentWithKey(owner, [], { name: 'Bare' })).key, EXT);
  }, 60_000);

  afterAll(async () => {
    for (const c of clients) await c.close().catch(() => undefined);
    await s?.stop();
  });

  it('1. orientation: instructions, the toolsets, and Space and folder summaries', async () => {
    step = '1 orientation';
    scribe = await connect(scribeKey);
    const instructions = scribe.getInstructions() ?? '';
    count(instructions);
    for (const part of ['load_project_context', 'context_bundle', 'space/folder/page.md', 'context_propose', 'base_sha']) {
      expect(instructions, part).toContain(part);
    }
    expect(instructions).toMatch(/toolset=extended/);

    // The tool lists a client loads into context, counted apart (they dwarf everything else).
    step = '1 tools/list';
    const spec = await scribe.listTools();
    count(JSON.stringify(spec));
    expect(spec.tools.map((t) => t.name).sort()).toEqual([...SPEC_16].sort());
    await expect(scribe.callTool({ name: 'context_append', arguments: { path: DEPLOY, text: 'x' } })).rejects.toThrow(/Unknown tool: context_append/);
    scribeX = await connect(scribeKey, EXT);
    const ext = await scribeX.listTools();
    count(JSON.stringify(ext));
    const names = ext.tools.map((t) => t.name);
    expect(names).toEqual(expect.arrayContaining([...SPEC_16, ...EXTENDED_GRANTED, ...EXTENDED_OWN]));
    expect(new Set(names).size).toBe(names.length);
    // Scout loads its list once too (its client validates structured results against it).
    count(JSON.stringify(await scoutX.listTools()));
    await scout.listTools();
    step = '1 orientation';

    // The person writes the Space's index page and a folder's; agents are oriented by them.
    expect((await owner.post('/api/v1/spaces', { id: 'eng', name: 'Engineering' })).status).toBe(201);
    const idx = await dana.client.post('/api/v1/nodes', {
      path: 'eng/index.md',
      content: '---\nsummary: "Engineering handbook: runbooks for deploys, decisions and on-call notes."\n---\n# Engineering\n\nStart here.\n',
    });
    expect(idx.status, idx.text).toBe(201);
    const fidx = await dana.client.post('/api/v1/nodes', {
      path: 'eng/runbooks/index.md',
      content: '# Runbooks\n\nStep-by-step guides for deploys and incidents, one page per service.\n\nOwners keep them current.\n',
    });
    expect(fidx.status, fidx.text).toBe(201);

    const res = await scribe.readResource({ uri: 'service://index' });
    const text = (res.contents[0] as { text: string }).text;
    count(text);
    expect(JSON.parse(text).spaces).toEqual([
      { id: 'eng', name: 'Engineering', summary: 'Engineering handbook: runbooks for deploys, decisions and on-call notes.' },
    ]);
    const tree = await ok(scribe, 'context_tree', { path: 'eng', depth: '2' });
    expect(tree.space.summary).toBe('Engineering handbook: runbooks for deploys, decisions and on-call notes.');
    const runbooks = (tree.tree.folders as { path: string; summary: string }[]).find((f) => f.path === 'eng/runbooks');
    expect(runbooks?.summary).toBe('Step-by-step guides for deploys and incidents, one page per service.');
  });

  it('2. work: writes, a section read, edits that do not resend the page, a bundle within budget', async () => {
    step = '2 work';
    // Path rules: a page path names a .md file; a hostile path is refused.
    expect(await fails(scribe, 'context_write', { path: 'eng/runbooks/deploy', content: DEPLOY_V1 }, 'invalid_path')).toMatch(
      /did you mean eng\/runbooks\/deploy\.md\?/,
    );
    await fails(scribe, 'context_write', { path: 'eng/../etc/passwd.md', content: '# x\n' }, 'invalid_path');
    deploy = await ok(scribe, 'context_write', { path: DEPLOY, content: DEPLOY_V1, message: 'Deploy runbook' });
    deployV1 = deploy.commit_sha;
    expect(deploy).toMatchObject({ path: DEPLOY, created: true, state: 'active', commit_sha: expect.stringMatching(/^[0-9a-f]{40}$/) });
    decision = await ok(scribe, 'context_write', {
      path: DECISION,
      content: '# Canary decision\n\nThe canary takes 5% of traffic.\n\nIt runs for 15 minutes.\n',
      message: 'Canary decision',
    });
    legacy = await ok(scribe, 'context_write', { path: 'eng/runbooks/deploy-2019.md', content: '# Deploy (2019)\n\nThe old manual deploy.\n' });

    // A section read: the section and the page's identity, a fraction of the page's tokens.
    const whole = await call(scribe, 'context_get', { path: DEPLOY });
    const sec = await ok(scribe, 'context_get', { path: DEPLOY, section: 'Rollback' });
    expect(Object.keys(sec).sort()).toEqual(['commit_sha', 'id', 'path', 'redacted', 'section', 'state', 'title']);
    expect(sec).toMatchObject({ id: deploy.id, path: DEPLOY, title: 'Deploy payments', commit_sha: deploy.commit_sha });
    expect(sec.section).toMatch(/^## Rollback\n\nRevert the release tag/);
    expect(sec.section).not.toContain('Check 1');
    // The same object also comes as structuredContent (the SDK client checks it against the tool's outputSchema).
    const structured = await scribe.callTool({ name: 'context_get', arguments: { path: DEPLOY, section: 'Rollback' } });
    expect(structured.structuredContent).toEqual(sec);
    const sectionTokens = encode(JSON.stringify(sec)).length;
    expect(sectionTokens * 5).toBeLessThan(encode(whole.text).length);

    // Edits without resending the page, each on the commit the previous one made.
    const appended = await ok(scribeX, 'context_append', { id: deploy.id, section: 'Steps', text: '3. Watch the canary.', base_sha: sec.commit_sha });
    expect(appended).toMatchObject({ id: deploy.id, changed: true, merged: false });
    const replaced = await ok(scribeX, 'context_replace_section', {
      path: DEPLOY,
      section: 'Canary',
      text: 'Send 10% of traffic to the canary for 20 minutes; watch error rate and p99 latency.',
      base_sha: appended.commit_sha,
      message: 'Bigger canary',
    });
    expect(replaced).toMatchObject({ changed: true, merged: false });
    const now = await ok(scribe, 'context_get', { id: deploy.id });
    expect(now.content).toMatch(/2\. Run the deploy pipeline\.\n\n?3\. Watch the canary\.\n\n## Canary\n\nSend 10% of traffic/);
    const patch = oneLinePatch(DEPLOY, now.content, 'Page the on-call engineer.', 'Page the payments on-call engineer, then the incident lead.');
    const patched = await ok(scribeX, 'context_patch', { id: deploy.id, patch, base_sha: replaced.commit_sha });
    expect(patched).toMatchObject({ changed: true, merged: false });
    deploy = { id: deploy.id, commit_sha: patched.commit_sha };
    const after = await ok(scribe, 'context_get', { id: deploy.id, section: 'Contacts' });
    expect(after.section).toContain('then the incident lead');
    expect((await ok(scribe, 'context_get', { id: deploy.id, section: 'Canary' })).section).toContain('10% of traffic');

    // The bundle: grouped by page, short commit ids, "N of B tokens used", never above the budget.
    await waitForVectors(owner);
    for (const budget of [1500, 300]) {
      const md: string = await ok(scribe, 'context_bundle', {
        intent: 'canary traffic and rollback of the payments deploy',
        scope: 'eng',
        budget_tokens: budget,
      });
      const used = encode(md).length;
      const m = STATUS_LINE.exec(md);
      expect(m, md.slice(0, 200)).not.toBeNull();
      expect(Number(m![1]), `budget ${budget}`).toBe(used);
      expect(Number(m![2])).toBe(budget);
      expect(used).toBeLessThanOrEqual(budget);
      const sources = md.split('\n').filter((l) => l.startsWith('source: '));
      const paths = sources.map((l) => l.split(' ')[1]);
      expect(new Set(paths).size).toBe(paths.length);
      expect(Number(m![4])).toBe(paths.length);
      expect(md).not.toMatch(/\b[0-9a-f]{40}\b/);
      if (budget === 1500) {
        expect(sources).toContain(`source: ${DEPLOY} (id ${deploy.id}, commit ${deploy.commit_sha.slice(0, 12)})`);
        expect(md).toContain('10% of traffic');
      }
    }
  });

  it('3. a second agent: search, errors that say what to do next, propose, archive, watch, own proposals', async () => {
    step = '3 scout';
    const hits = await ok(scout, 'context_search', { query: 'canary rollback payments' });
    expect(hits.results.map((r: { path: string }) => r.path)).toContain(DEPLOY);
    const hit = hits.results.find((r: { path: string }) => r.path === DEPLOY);
    expect(hit).toMatchObject({ id: deploy.id, state: 'active' });
    expect(typeof hit.snippet).toBe('string');

    const scope = await fails(scout, 'context_search', { query: 'canary', scope: 'engineering' }, 'unknown_scope');
    expect(scope).toMatch(/No scope engineering/);
    expect(scope).toMatch(/Scopes you can use: eng\b/);
    expect(await fails(scout, 'context_get', { path: 'eng/runbooks/deploy' }, 'not_found')).toMatch(/did you mean eng\/runbooks\/deploy\.md\?/);
    const missing = await fails(scout, 'context_get', { path: DEPLOY, section: 'Roll back' }, 'section_not_found');
    expect(missing).toMatch(/headings: "Deploy payments", "Before you start", "Steps", "Canary", "Rollback", "Contacts"/);

    const write = await fails(scout, 'context_write', { path: DEPLOY, content: `${DEPLOY_V1}\nMore.\n` }, 'forbidden');
    expect(write).toMatch(/use context_propose$/);
    const page = await ok(scout, 'context_get', { path: DECISION });
    const proposed = await ok(scout, 'context_propose', {
      path: DECISION,
      content: `${page.content}\nThe canary also checks flag cohorts.\n`,
      base_sha: page.commit_sha,
      reason: 'Incident review: flag cohorts broke payments',
    });
    expect(proposed.proposal).toMatchObject({ id: expect.stringMatching(/^pp_/), status: 'open' });
    toWithdraw = (await ok(scout, 'context_propose', { path: 'eng/runbooks/refunds.md', content: '# Refunds\n\nDraft.\n', reason: 'missing runbook' })).proposal
      .id;

    // An archive without write is queued for review: a success, not an error to retry.
    const archived = await run(scout, 'context_archive', { id: legacy.id, reason: 'superseded' });
    expect(archived.isError, archived.text).toBe(false);
    expect(archived.json).toEqual({
      proposed: true,
      proposal: expect.objectContaining({ id: expect.stringMatching(/^pp_/), kind: 'archive', status: 'open', node_id: legacy.id }),
    });

    const w = await ok(scoutX, 'context_watch', { path: 'eng/runbooks' });
    expect(w).toMatchObject({ created: true, watch: { kind: 'folder', path: 'eng/runbooks', delivering: true } });

    const mine = await ok(scoutX, 'context_proposals', {});
    expect(mine.proposals.map((p: { id: string }) => p.id)).toEqual([archived.json.proposal.id, toWithdraw, proposed.proposal.id]);
    expect(
      mine.proposals.map((p: { status: string }) => p.status),
      JSON.stringify(mine),
    ).toEqual(['open', 'open', 'open']);
    expect(mine.proposals[0].content).toBeUndefined();
    const withdrawn = await ok(scoutX, 'context_withdraw', { id: toWithdraw, reason: 'Dana writes it' });
    expect(withdrawn).toMatchObject({ id: toWithdraw, status: 'rejected', decision_reason: expect.stringMatching(/^Withdrawn by its author: Dana writes it/) });
    expect((await ok(scoutX, 'context_proposals', { status: 'open', limit: '5' })).proposals).toHaveLength(2);
  });

  it('4. conflict, numeric strings and a misspelled argument', async () => {
    step = '4 conflict';
    const read = await ok(scribe, 'context_get', { path: DECISION });
    // The person changes the line the agent is about to change.
    const put = await dana.client.put(`/api/v1/nodes/${decision.id}`, {
      content: read.content.replace('It runs for 15 minutes.', 'It runs for 30 minutes.'),
      base_sha: read.commit_sha,
    });
    expect(put.status, put.text).toBe(200);
    const head: string = put.body.commit_sha;
    const t = await fails(
      scribe,
      'context_write',
      { path: DECISION, content: read.content.replace('It runs for 15 minutes.', 'It runs for 20 minutes.'), base_sha: read.commit_sha },
      'conflict',
    );
    expect(t).toContain(`head is now commit ${head}`);
    expect(t).toMatch(/yours "It runs for 20 minutes\."/);
    expect(t).toMatch(/now "It runs for 30 minutes\."/);
    expect(t).toMatch(new RegExp(`Next: read the page again at commit ${head}.*write with base_sha ${head}`));
    expect(t).toMatch(/\(proposal pp_[0-9a-z]+ created\)$/);
    // Following the advice works.
    const again = await ok(scribe, 'context_get', { path: DECISION });
    expect(again.commit_sha).toBe(head);
    decision = await ok(scribe, 'context_write', {
      path: DECISION,
      content: again.content.replace('30 minutes', '20 to 30 minutes'),
      base_sha: head,
      message: 'Canary length agreed',
    });

    const limited = await ok(scribe, 'context_search', { query: 'canary', limit: '3' });
    expect(limited.results.length).toBeGreaterThan(0);
    expect(limited.results.length).toBeLessThanOrEqual(3);
    const typo = await fails(scribe, 'context_bundle', { intent: 'canary', budget: 400 }, 'invalid_request');
    expect(typo).toMatch(/unknown argument "budget", did you mean "budget_tokens"\?/);
    expect(await fails(scribe, 'context_search', { qurey: 'canary' }, 'invalid_request')).toMatch(/did you mean "query"\?.*query: required/);
  });

  it('5. collaboration: @name mentions a person, the thread locks after 4 agent hops, the thread reads back', async () => {
    step = '5 collab';
    const first = await ok(scribe, 'collab_post', {
      node: DEPLOY,
      body: '@Dana the canary now takes 10% for 20 minutes; is that threshold right?',
      kind: 'question',
    });
    expect(first).toMatchObject({ id: expect.any(String), mentions: [dana.id], thread: { locked: false, agent_hops: 1 } });
    const inbox = await dana.client.get('/api/v1/inbox?state=all&limit=100');
    expect(inbox.status, inbox.text).toBe(200);
    const mention = (inbox.body.events as { kind: string; page_id: string; payload: any }[]).find((e) => e.kind === 'mention');
    expect(mention).toMatchObject({ page_id: deploy.id, payload: expect.objectContaining({ path: DEPLOY }) });

    // No person answers; the agent keeps posting until the loop breaker stops it.
    let last: any;
    for (const body of ['Following up on the canary threshold.', 'Still waiting on the threshold.', 'Pinging again about the threshold.']) {
      last = await ok(scribe, 'collab_post', { node: deploy.id, body, reply_to: first.id });
    }
    expect(last.thread).toMatchObject({ locked: true, agent_hops: 4 });
    const locked = await fails(scribe, 'collab_post', { node: deploy.id, body: 'One more?' }, 'thread_locked');
    expect(locked).toMatch(/stop posting here and do not retry/);
    // The people who can unlock it (editors and owners) hear of it, once.
    for (const person of [dana.client, owner]) {
      const events = (await person.get('/api/v1/inbox?state=all&limit=100')).body.events as { kind: string; payload: any }[];
      const lockEvents = events.filter((e) => e.kind === 'thread_locked');
      expect(lockEvents).toHaveLength(1);
      expect(lockEvents[0]!.payload).toMatchObject({ path: DEPLOY, agent_hops: 4, unlock: `POST /api/v1/nodes/${deploy.id}/threads/unlock` });
    }

    const thread = await ok(scoutX, 'collab_thread', { node: DEPLOY });
    expect(thread).toMatchObject({ page_id: deploy.id, locked: true });
    expect(thread.messages).toHaveLength(4);
    expect(thread.messages[0]).toMatchObject({ id: first.id, author: { id: scribeId, name: 'Scribe', kind: 'agent' } });
    expect(thread.messages[0].body).toContain('@Dana');
  });

  it('6. catch-up: changes since a cursor, history, a read at a commit, the diff refused, watch events', async () => {
    step = '6 catch-up';
    // Start from a clean inbox for both agents (Scout's watch saw nothing yet; Scribe's earlier events are done).
    for (const c of [scoutX, scribeX]) {
      const r = await ok(c, 'collab_inbox', { limit: 100 });
      if (r.events.length > 0) await ok(c, 'collab_ack', { up_to: r.next_after });
    }
    await ok(scribeX, 'context_watch', { path: 'eng/runbooks' });

    const first = await ok(scoutX, 'context_changes', { scope: 'eng' });
    expect(first.more).toBe(false);
    const seen = first.changes.map((c: { change: string; path: string }) => `${c.change} ${c.path}`);
    expect(seen).toEqual(expect.arrayContaining([`created ${DEPLOY}`, `changed ${DEPLOY}`, `created ${DECISION}`, 'created eng/index.md']));
    expect(first.changes.filter((c: { path: string }) => c.path === DEPLOY)).toHaveLength(4);

    // Scribe works on; Scout catches up with exactly what happened since.
    const a1 = await ok(scribeX, 'context_append', { id: deploy.id, text: 'Last reviewed by Scribe.', base_sha: deploy.commit_sha });
    const a2 = await ok(scribeX, 'context_append', {
      id: deploy.id,
      section: 'Rollback',
      text: 'Keep the previous build warm for an hour.',
      base_sha: a1.commit_sha,
    });
    const oncall = await ok(scribe, 'context_write', { path: 'eng/runbooks/oncall.md', content: '# On call\n\nThe payments rotation changes on Mondays.\n' });
    const since = await ok(scoutX, 'context_changes', { scope: 'eng', since: first.next, limit: '10' });
    expect(since.changes.map((c: { change: string; path: string }) => `${c.change} ${c.path}`)).toEqual([
      `changed ${DEPLOY}`,
      `changed ${DEPLOY}`,
      'created eng/runbooks/oncall.md',
    ]);
    expect(since.changes.map((c: { commit_sha: string }) => c.commit_sha)).toEqual([a1.commit_sha, a2.commit_sha, oncall.commit_sha]);
    expect(since.changes[0].author).toEqual({ id: scribeId, name: 'Scribe' });
    expect(await ok(scoutX, 'context_changes', { scope: 'eng', since: since.next })).toEqual({ changes: [], next: since.next, more: false });

    const history = await ok(scoutX, 'context_history', { path: DEPLOY, limit: 10 });
    // Created, appended, replaced, patched (step 2), appended twice (here): newest first.
    expect(history.versions.map((v: { commit_sha: string }) => v.commit_sha)).toEqual([
      a2.commit_sha,
      a1.commit_sha,
      deploy.commit_sha,
      expect.stringMatching(/^[0-9a-f]{40}$/),
      expect.stringMatching(/^[0-9a-f]{40}$/),
      deployV1,
    ]);
    expect(history.versions.map((v: { action: string }) => v.action)).toEqual(['update', 'update', 'update', 'update', 'update', 'create']);
    const v1 = deployV1;
    const past = await ok(scoutX, 'context_get_at', { path: DEPLOY, at: v1.slice(0, 10), section: 'Canary' });
    expect(past.section).toContain('5% of traffic');
    expect(past.commit_sha).toBe(v1);
    // As with context_get: a section read is the section and the page's identity, not the whole page again.
    expect.soft(past.content, 'context_get_at with section also returns the whole page').toBeUndefined();
    // The diff shows raw text of two versions: an internal-ceiling agent is refused, and told why.
    expect(await fails(scoutX, 'context_diff', { path: DEPLOY }, 'forbidden')).toMatch(/secret-level read/);

    // Scout's folder watch: one page_changed per page while unread (the two appends coalesce).
    const got = await ok(scoutX, 'collab_inbox', { limit: 100 });
    const changed = (got.events as { kind: string; page_id: string; payload: any }[]).filter((e) => e.kind === 'page_changed');
    expect(changed).toHaveLength(2);
    const byPage = new Map(changed.map((e) => [e.page_id, e.payload]));
    expect(byPage.get(deploy.id)).toMatchObject({ path: DEPLOY, changes: 2, commit_sha: a2.commit_sha, actor: { id: scribeId, name: 'Scribe' } });
    expect(byPage.get(oncall.id)).toMatchObject({ action: 'create', path: 'eng/runbooks/oncall.md', changes: 1 });
    // No field said twice: the page id is the event's, not the payload's too.
    for (const e of changed) expect(Object.keys(e.payload)).not.toContain('page_id');
    // Scribe watches the same folder: its own changes never come back to it.
    const own = await ok(scribeX, 'collab_inbox', { limit: 100 });
    expect((own.events as { kind: string }[]).filter((e) => e.kind === 'page_changed' || e.kind === 'watch_digest')).toEqual([]);
  });

  it('7. every extended call needing a grant is refused to an agent without it', async () => {
    step = '7 no grant';
    const ref = { id: deploy.id };
    const args: Record<string, Record<string, unknown>> = {
      context_append: { ...ref, text: 'x' },
      context_replace_section: { ...ref, section: 'Canary', text: 'x' },
      context_patch: { ...ref, patch: '--- a\n+++ b\n@@ -1 +1 @@\n-# Deploy payments\n+# Deploy\n' },
      context_move: { ...ref, to: 'eng/runbooks/moved.md' },
      context_changes: { scope: 'eng' },
      context_history: ref,
      context_diff: ref,
      context_get_at: { ...ref, at: deploy.commit_sha },
      collab_thread: { node: deploy.id },
      context_proposals: {},
      context_withdraw: { id: 'pp_00000000000000000000000000' },
      context_watch: { path: 'eng' },
    };
    expect(Object.keys(args).sort()).toEqual([...EXTENDED_GRANTED].sort());
    for (const [name, a] of Object.entries(args)) {
      const t = await fails(bare, name, a, 'forbidden');
      if (['context_append', 'context_replace_section', 'context_patch'].includes(name)) expect(t, name).toContain('context_propose');
    }
    // The calls about the caller's own watches need no grant.
    expect(await ok(bare, 'context_watches')).toMatchObject({ watches: [] });
    await fails(bare, 'context_unwatch', { path: 'eng' }, 'not_found');
    // Nothing was changed by the refused calls.
    expect((await ok(scribe, 'context_get', { id: deploy.id })).path).toBe(DEPLOY);
  });

  it('stays within the session token ceilings', () => {
    const rows = [...tokens].map(([name, n]) => ({ step: name, tokens: n }));
    const lists = tokens.get('1 tools/list') ?? 0;
    const total = rows.reduce((sum, r) => sum + r.tokens, 0);
    const line = (name: string, n: number) => `  ${name.padEnd(14)} ${String(n).padStart(6)}`;
    console.log(
      [
        `[${engine}] tokens (o200k) the agents' models read, per step:`,
        ...rows.map((r) => line(r.step, r.tokens)),
        line('results', total - lists),
        line('total', total),
      ].join('\n'),
    );
    expect(rows.map((r) => r.step)).toEqual(['1 orientation', '1 tools/list', '2 work', '3 scout', '4 conflict', '5 collab', '6 catch-up', '7 no grant']);
    expect(total - lists).toBeGreaterThan(5000);
    expect(total - lists).toBeLessThan(RESULTS_CEILING);
    expect(lists).toBeLessThan(TOOL_LISTS_CEILING);
  });
});
