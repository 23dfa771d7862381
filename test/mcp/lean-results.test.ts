import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { encode } from 'gpt-tokenizer/encoding/o200k_base';
import { testEngines } from '../support/engines.js';
import { waitForVectors } from '../support/embeddings-server.js';
import { createAgentWithKey, signupHuman, startTestServer, type Client, type TestServer } from '../support/server.js';
import { call, connectMcp, fails, ok } from './support.js';

/**
 * Issue 13, lean results and the MCP face's own errors: a section read returns the section and
 * the page's identity; bundles group sections by page, drop heading-only sections, cite short
 * commit ids and say how many tokens they used; JSON results also come as structuredContent
 * matching the declared outputSchema (the SDK client checks it); numeric strings are accepted
 * where a number is wanted; a misspelled argument gets a suggestion; an archive that became a
 * proposal is a success; inbox events carry no repeated fields.
 */

const STATUS_LINE = /^(\d+) of (\d+) tokens used; (\d+) sections? from (\d+) pages?$/m;

describe.each(testEngines())('MCP lean results (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let full: McpClient;
  let fullId: string;
  let fullRest: Client;
  let proposer: McpClient;
  let reader: McpClient;
  let runbook: { id: string; commit_sha: string };

  beforeAll(async () => {
    s = await startTestServer(engine);
    const h = await signupHuman(s.url, 'Olive');
    owner = h.client;
    const a = await createAgentWithKey(owner, [{ action: 'read' }, { action: 'write' }, { action: 'search' }, { action: 'propose' }, { action: 'collab' }], {
      name: 'Scribe',
    });
    fullId = a.id;
    fullRest = a.client;
    full = await connectMcp(s.url, a.key);
    proposer = await connectMcp(s.url, (await createAgentWithKey(owner, [{ action: 'read' }, { action: 'propose' }], { name: 'Proposer' })).key);
    reader = await connectMcp(s.url, (await createAgentWithKey(owner, [{ action: 'read' }], { name: 'Reader' })).key);
    // The client validates structuredContent against the outputSchemas it learnt from tools/list.
    for (const c of [full, proposer, reader]) await c.listTools();

    runbook = await ok(full, 'context_write', {
      path: 'ops/runbooks/failover.md',
      content: [
        '# Failover',
        '',
        'The quokka cluster fails over to the second zone.',
        '',
        '## Preparation',
        '',
        '## Quokka steps',
        '',
        'Promote the quokka replica, then move the quokka DNS record.',
        '',
        '## Quokka checks',
        '',
        'Quokka connections recover within a minute.',
        '',
      ].join('\n'),
    });
    await ok(full, 'context_write', { path: 'ops/runbooks/quokka-history.md', content: '# Quokka history\n\nThe quokka cluster was built in 2019.\n' });
    let long = '# Quokka manual\n\n';
    for (let i = 0; i < 40; i++) long += `## Quokka part ${i}\n\n${'The quokka service keeps its queue short and its replicas warm. '.repeat(8)}\n\n`;
    await ok(full, 'context_write', { path: 'ops/manuals/quokka.md', content: long });
    await waitForVectors(owner);
  });

  afterAll(async () => {
    for (const c of [full, proposer, reader]) await c?.close();
    await s?.stop();
  });

  describe('context_get with a section', () => {
    it('returns the section and the page identity, not the whole page', async () => {
      const r = await ok(reader, 'context_get', { path: 'ops/runbooks/failover.md', section: 'Quokka steps' });
      expect(Object.keys(r).sort()).toEqual(['commit_sha', 'id', 'path', 'redacted', 'section', 'state', 'title']);
      expect(r).toMatchObject({ id: runbook.id, path: 'ops/runbooks/failover.md', title: 'Failover', commit_sha: runbook.commit_sha, state: 'active' });
      expect(r.section).toBe('## Quokka steps\n\nPromote the quokka replica, then move the quokka DNS record.\n');
      // Without a section the whole page comes, as before.
      expect((await ok(reader, 'context_get', { id: runbook.id })).content).toContain('Quokka connections recover');
      // A section that is not there is an error, and REST keeps its own answer (the record and the section).
      await fails(reader, 'context_get', { id: runbook.id, section: 'Nowhere' }, 'section_not_found');
      const rest = await owner.get(`/api/v1/nodes/${runbook.id}?section=${encodeURIComponent('Quokka steps')}`);
      expect(rest.status).toBe(200);
      expect(rest.body.content).toContain('Quokka connections recover');
      expect(rest.body.section).toBe(r.section);
    });
  });

  describe('context_bundle', () => {
    it('groups sections by page under one source line with a short commit id, drops heading-only sections and states the tokens used', async () => {
      const md: string = await ok(full, 'context_bundle', { intent: 'quokka failover steps and checks', scope: 'ops/runbooks', budget_tokens: 2000 });
      expect(typeof md).toBe('string');
      const sources = md.split('\n').filter((l) => l.startsWith('source: '));
      const paths = sources.map((l) => l.split(' ')[1]);
      // One source line per page, never repeated.
      expect(new Set(paths).size).toBe(paths.length);
      expect(paths).toContain('ops/runbooks/failover.md');
      const line = sources.find((l) => l.includes('ops/runbooks/failover.md'))!;
      expect(line).toBe(`source: ops/runbooks/failover.md (id ${runbook.id}, commit ${runbook.commit_sha.slice(0, 12)})`);
      // No full 40-digit commit id anywhere in the markdown.
      expect(md).not.toMatch(/\b[0-9a-f]{40}\b/);
      // Sections of one page sit together under its header, in the page's order.
      const block = md.slice(md.indexOf(line));
      expect(block.indexOf('Promote the quokka replica')).toBeGreaterThan(0);
      expect(block.indexOf('Promote the quokka replica')).toBeLessThan(block.indexOf('Quokka connections recover'));
      // The heading-only section says nothing and is left out.
      expect(md).not.toContain('## Preparation');
      // The header states the tokens used of the budget, and the figure is exact.
      const m = STATUS_LINE.exec(md);
      expect(m, md.slice(0, 300)).not.toBeNull();
      expect(Number(m![1])).toBe(encode(md).length);
      expect(Number(m![2])).toBe(2000);
      expect(Number(m![4])).toBe(paths.length);
      // REST answers with the same renderer.
      const rest = await owner.post('/api/v1/bundle', { intent: 'quokka failover steps and checks', scope: 'ops/runbooks', budget_tokens: 2000 });
      expect(rest.status).toBe(200);
      expect(rest.body.used_tokens).toBe(encode(rest.body.markdown).length);
      expect(rest.body.markdown).toMatch(STATUS_LINE);
      expect(rest.body.sections.some((x: { heading: string }) => x.heading === 'Preparation')).toBe(false);
    });

    it('never exceeds its budget, with the status line counted in', async () => {
      for (const budget of [200, 257, 300, 480, 999, 1000, 1001, 1500, 3000]) {
        const md: string = await ok(full, 'context_bundle', { intent: 'quokka service queue replicas', scope: 'ops', budget_tokens: budget });
        const used = encode(md).length;
        expect(used, `budget ${budget}`).toBeLessThanOrEqual(budget);
        const m = STATUS_LINE.exec(md);
        expect(Number(m![1]), `budget ${budget}`).toBe(used);
        expect(Number(m![3]), `budget ${budget}`).toBeGreaterThan(0);
      }
    });

    it('load_project_context uses the same grouped bundle', async () => {
      const r = await reader.getPrompt({ name: 'load_project_context', arguments: { project: 'ops', budget_tokens: '1500' } });
      const text = (r.messages[0]!.content as { text: string }).text;
      expect(text).toMatch(STATUS_LINE);
      expect(text).toMatch(/source: ops\/\S+ \(id pg_[0-9a-z]+, commit [0-9a-f]{12}\)/);
      expect(text).not.toMatch(/\b[0-9a-f]{40}\b/);
    });
  });

  describe('structuredContent', () => {
    it('comes with the JSON tools that declare an outputSchema, equal to the text, and valid for the SDK client', async () => {
      const { tools } = await full.listTools();
      const declared = new Map(tools.filter((t) => t.outputSchema).map((t) => [t.name, t.outputSchema!]));
      expect([...declared.keys()].sort()).toEqual(
        [
          'collab_ack',
          'collab_inbox',
          'collab_post',
          'context_get',
          'context_propose',
          'context_related',
          'context_search',
          'context_whoami',
          'context_write',
          'fetch',
          'search',
        ].sort(),
      );
      for (const schema of declared.values()) expect(schema.type).toBe('object');
      // Markdown answers keep text only.
      expect(tools.find((t) => t.name === 'context_bundle')!.outputSchema).toBeUndefined();

      const calls: [string, Record<string, unknown>][] = [
        ['context_get', { id: runbook.id }],
        ['context_get', { id: runbook.id, section: 'Quokka checks' }],
        ['context_search', { query: 'quokka' }],
        ['search', { query: 'quokka' }],
        ['fetch', { id: runbook.id }],
        ['context_related', { id: runbook.id }],
        ['context_whoami', {}],
        ['context_write', { path: 'ops/notes/structured.md', content: '# Structured\n\nyes\n' }],
        ['context_propose', { path: 'ops/notes/structured.md', content: '# Structured\n\nmaybe\n' }],
        ['collab_post', { node: runbook.id, body: 'structured?' }],
        ['collab_inbox', {}],
        ['collab_ack', { seqs: [] }],
      ];
      for (const [name, args] of calls) {
        // callTool throws when structuredContent is missing or does not match the schema.
        const r = await full.callTool({ name, arguments: args });
        expect(r.isError, `${name}: ${JSON.stringify(r.content)}`).toBeFalsy();
        const text = (r.content as { text: string }[])[0]!.text;
        expect(r.structuredContent, name).toEqual(JSON.parse(text));
      }
      const md = await full.callTool({ name: 'context_bundle', arguments: { intent: 'quokka' } });
      expect(md.structuredContent).toBeUndefined();
      // An error result carries no structuredContent.
      const err = await full.callTool({ name: 'context_get', arguments: { path: 'ops/nope.md' } });
      expect(err.isError).toBe(true);
      expect(err.structuredContent).toBeUndefined();
    });
  });

  describe('arguments models send', () => {
    it('accepts numeric strings where a number is wanted, and still refuses junk', async () => {
      const r = await ok(full, 'context_search', { query: 'quokka', limit: '2' });
      expect(r.results.length).toBeLessThanOrEqual(2);
      expect(r.results.length).toBeGreaterThan(0);
      const md = await ok(full, 'context_bundle', { intent: 'quokka', budget_tokens: ' 300 ' });
      expect(encode(md).length).toBeLessThanOrEqual(300);
      expect((await ok(full, 'context_tree', { path: 'ops', depth: '1' })).tree.folders.length).toBeGreaterThan(0);
      expect(await ok(full, 'collab_inbox', { wait_s: '0', limit: '5', after: '0' })).toHaveProperty('events');
      expect(await ok(full, 'collab_ack', { seqs: ['99999'] })).toEqual({ done: 0 });

      expect(await fails(full, 'context_search', { query: 'quokka', limit: 'abc' }, 'invalid_request')).toContain('limit');
      expect(await fails(full, 'context_search', { query: 'quokka', limit: '2.5' }, 'invalid_request')).toContain('limit');
      expect(await fails(full, 'context_search', { query: 'quokka', limit: '51' }, 'invalid_request')).toContain('limit');
      expect(await fails(full, 'context_bundle', { intent: 'quokka', budget_tokens: '4k' }, 'invalid_request')).toContain('budget_tokens');
      expect(await fails(full, 'collab_ack', { seqs: ['x'] }, 'invalid_request')).toContain('seqs');
      // Only numbers are coerced: a string argument stays a string, a number where a string is wanted fails.
      expect(await fails(full, 'context_get', { path: 5 }, 'invalid_request')).toContain('path');
      expect((await ok(full, 'context_search', { query: '2019' })).results).toEqual(expect.any(Array));
    });

    it('suggests the argument a misspelled one meant', async () => {
      const t = await fails(full, 'context_search', { qeury: 'quokka' }, 'invalid_request');
      expect(t).toContain('unknown argument "qeury", did you mean "query"?');
      expect(t).toContain('query: required');
      expect(t).not.toContain('received undefined');
      expect(await fails(full, 'context_get', { pth: 'ops/runbooks/failover.md' }, 'invalid_request')).toContain('did you mean "path"?');
      expect(await fails(full, 'context_bundle', { intent: 'x', budget: 400 }, 'invalid_request')).toContain(
        'unknown argument "budget", did you mean "budget_tokens"?',
      );
      expect(await fails(full, 'context_search', { query: 'x', includeArchived: true }, 'invalid_request')).toContain('did you mean "include_archived"?');
      // A short name is not matched loosely: "xy" is not "id".
      expect(await fails(full, 'fetch', { xy: 'a' }, 'invalid_request')).toContain('unknown argument "xy"; this tool takes "id"');
      expect(await fails(full, 'collab_inbox', { waitS: 1 }, 'invalid_request')).toContain('did you mean "wait_s"?');
      // Nothing close: the tool's arguments are listed.
      const far = await fails(full, 'context_get', { zzzzzzzz: 1, id: runbook.id }, 'invalid_request');
      expect(far).toContain('unknown argument "zzzzzzzz"; this tool takes "id", "node_id", "path", "section"');
      expect(await fails(full, 'context_whoami', { me: true }, 'invalid_request')).toContain('takes no arguments');
    });
  });

  describe('archive by an agent that may only propose', () => {
    it('is a success saying proposed: true, with the proposal a reviewer sees', async () => {
      const page = await ok(full, 'context_write', { path: 'ops/notes/old-quokka.md', content: '# Old quokka\n\nretired\n' });
      const r = await call(proposer, 'context_archive', { id: page.id, reason: 'stale' });
      expect(r.isError, r.text).toBe(false);
      expect(r.json).toEqual({
        proposed: true,
        proposal: expect.objectContaining({ id: expect.stringMatching(/^pp_/), status: 'open', kind: 'archive', node_id: page.id }),
      });
      const pr = await owner.get(`/api/v1/proposals/${r.json.proposal.id}`);
      expect(pr.body).toMatchObject({ kind: 'archive', status: 'open', params: { reason: 'stale' } });
      expect((await owner.get(`/api/v1/nodes/${page.id}`)).body.state).toBe('active');
      // Without propose either, it is still refused.
      await fails(reader, 'context_archive', { id: page.id }, 'forbidden');
      // A hidden or unknown page is not_found, not a proposal.
      await fails(proposer, 'context_archive', { id: 'pg_00000000000000000000000000' }, 'not_found');
    });
  });

  describe('collab_inbox', () => {
    it('events carry no repeated or empty fields', async () => {
      const before = await ok(full, 'collab_inbox', {});
      if (before.events.length > 0) await ok(full, 'collab_ack', { up_to: before.next_after });
      const post = await owner.post(`/api/v1/nodes/${runbook.id}/threads`, { body: 'Ping @Scribe about quokka', mentions: [fullId] });
      expect(post.status).toBe(201);
      const got = await ok(full, 'collab_inbox', {});
      const ev = got.events.find((e: { kind: string }) => e.kind === 'mention');
      expect(ev).toMatchObject({ kind: 'mention', state: 'unread', page_id: runbook.id });
      expect(ev.payload).toMatchObject({ path: 'ops/runbooks/failover.md' });
      expect(ev.payload.page_id).toBeUndefined();
      expect('proposal_id' in ev).toBe(false);
      for (const e of got.events) for (const v of Object.values(e)) expect(v).not.toBeNull();
      // REST keeps its own event shape.
      const rest = (await fullRest.get('/api/v1/inbox?state=all')).body.events.find((e: { seq: number }) => e.seq === ev.seq);
      expect(rest).toMatchObject({ seq: ev.seq, page_id: runbook.id, proposal_id: null, payload: { page_id: runbook.id } });
    });
  });
});
