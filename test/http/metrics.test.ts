import crypto from 'node:crypto';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { startServer, type RunningServer } from '../../src/server.js';
import { createTestDatabase, testEngines, type TestDatabase } from '../support/engines.js';
import { expectStatus } from '../support/expect.js';
import { Client, createAgentWithKey, signupHuman, startServerOn } from '../support/server.js';

/**
 * GET /metrics (issue 16, "Metrics and logs"): Prometheus text behind METRICS_TOKEN, scraped and
 * parsed here as Prometheus would; and the request log, captured from the server's own log
 * stream: each finished request names its principal by id, and no secret reaches the log.
 */

const TOKEN = `mt_${crypto.randomBytes(24).toString('hex')}`;
const PASSWORD = 'correct horse battery';

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The Prometheus text exposition format, as much as a scrape needs: samples with labels and values. */
function parseMetrics(text: string): { samples: Sample[]; types: Map<string, string> } {
  const samples: Sample[] = [];
  const types = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (line.startsWith('# TYPE ')) {
      const [, , name, type] = line.split(' ');
      types.set(name!, type!);
      continue;
    }
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: \d+)?$/.exec(line);
    if (!m) throw new Error(`not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    const body = m[2] ?? '';
    const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?/gy;
    let lm: RegExpExecArray | null;
    let consumed = 0;
    while ((lm = re.exec(body))) {
      labels[lm[1]!] = lm[2]!.replace(/\\n/g, '\n').replace(/\\"/g, '"').replace(/\\\\/g, '\\');
      consumed = re.lastIndex;
    }
    if (consumed !== body.length) throw new Error(`bad labels: ${line}`);
    const v = m[3]!;
    samples.push({ name: m[1]!, labels, value: v === '+Inf' ? Infinity : v === '-Inf' ? -Infinity : Number(v) });
  }
  return { samples, types };
}

function find(samples: Sample[], name: string, labels: Record<string, string> = {}): Sample[] {
  return samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
}

/** Sum of the matching samples (0 when none: a counter not yet incremented is absent). */
function total(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  return find(samples, name, labels).reduce((a, s) => a + s.value, 0);
}

describe.each(testEngines())('/metrics and request logs (%s)', (engine) => {
  let tdb: TestDatabase;
  let server: RunningServer;
  let plain: RunningServer | undefined;
  let url: string;
  const lines: string[] = [];
  let owner: Awaited<ReturnType<typeof signupHuman>>;
  let pageId: string;

  const scrape = async (token = TOKEN) => {
    const res = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${token}` } });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    return parseMetrics(await res.text());
  };

  beforeAll(async () => {
    tdb = await createTestDatabase(engine);
    const config = loadConfig({
      PORT: '0',
      HOST: '127.0.0.1',
      DATA_DIR: tdb.dataDir,
      LOG_LEVEL: 'info',
      RATE_LIMITS: 'off',
      METRICS_TOKEN: TOKEN,
      ...(tdb.databaseUrl ? { DATABASE_URL: tdb.databaseUrl } : {}),
    });
    const stream = new Writable({
      write(chunk, _enc, done) {
        lines.push(String(chunk));
        done();
      },
    });
    server = await startServer(config, { logger: { level: 'info', stream } });
    url = server.url;
    owner = await signupHuman(url, 'Mira');
    const created = await owner.client.post('/api/v1/nodes', { path: 'ops/runbook.md', content: '# Runbook\n\nRestart the workers when the backlog grows.\n' });
    expectStatus(created, 201);
    pageId = created.body.id;
  }, 60_000);
  afterAll(async () => {
    await plain?.close();
    await server?.close();
    await tdb?.cleanup();
  });

  describe('GET /metrics', () => {
    it('does not exist without METRICS_TOKEN: 404 like any unknown URL', async () => {
      // A second node of the same deployment, started without the token.
      plain = await startServerOn({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl });
      const res = await new Client(plain.url).get('/metrics', { authorization: `Bearer ${TOKEN}` });
      expect(res.status).toBe(404);
      expect(res.body.code).toBe('not_found');
      const unknown = await new Client(plain.url).get('/no-such-thing');
      expect(res.body.error.message.replace('/metrics', '')).toBe(unknown.body.error.message.replace('/no-such-thing', ''));
    });

    it('refuses a missing or wrong token with 401', async () => {
      const c = new Client(url);
      const cases: Record<string, string>[] = [
        {},
        { authorization: 'Bearer wrong-token-of-some-length' },
        { authorization: `Bearer ${TOKEN.slice(0, -1)}x` },
        { authorization: `Bearer ${TOKEN}extra` },
        { authorization: `Basic ${Buffer.from(`x:${TOKEN}`).toString('base64')}` },
      ];
      for (const headers of cases) {
        const res = await c.get('/metrics', headers);
        expect(res.status, JSON.stringify(headers)).toBe(401);
        expect(res.body.code).toBe('unauthorized');
        expect(res.headers.get('www-authenticate')).toMatch(/^Bearer/);
        expect(res.text).not.toContain('cv_');
      }
    });

    it('is absent from the OpenAPI document', async () => {
      const doc = await new Client(url).get('/api/v1/openapi.json');
      expect(doc.status).toBe(200);
      expect(Object.keys(doc.body.paths)).not.toContain('/metrics');
    });

    it('counts requests by route pattern and status, with latency histograms', async () => {
      const before = await scrape();
      const route = '/api/v1/nodes/:id';
      const was = total(before.samples, 'cv_http_requests_total', { method: 'GET', route, status: '200' });
      for (let i = 0; i < 3; i++) expectStatus(await owner.client.get(`/api/v1/nodes/${pageId}`), 200);
      expect((await owner.client.get('/api/v1/nodes/pg_00000000000000000000000000')).status).toBe(404);
      const after = await scrape();
      expect(total(after.samples, 'cv_http_requests_total', { method: 'GET', route, status: '200' })).toBeGreaterThanOrEqual(was + 3);
      expect(total(after.samples, 'cv_http_requests_total', { method: 'GET', route, status: '404' })).toBeGreaterThanOrEqual(1);
      expect(total(after.samples, 'cv_http_requests_total', { method: 'POST', route: '/api/v1/nodes', status: '201' })).toBeGreaterThanOrEqual(1);
      expect(after.types.get('cv_http_requests_total')).toBe('counter');

      // A histogram: cumulative buckets ending in +Inf, which equals _count.
      expect(after.types.get('cv_http_request_duration_seconds')).toBe('histogram');
      const buckets = find(after.samples, 'cv_http_request_duration_seconds_bucket', { method: 'GET', route });
      expect(buckets.length).toBeGreaterThan(5);
      const les = buckets.map((b) => Number(b.labels.le === '+Inf' ? Infinity : b.labels.le));
      expect(les).toEqual([...les].sort((a, b) => a - b));
      expect(les.at(-1)).toBe(Infinity);
      for (let i = 1; i < buckets.length; i++) expect(buckets[i]!.value).toBeGreaterThanOrEqual(buckets[i - 1]!.value);
      const count = total(after.samples, 'cv_http_request_duration_seconds_count', { method: 'GET', route });
      expect(buckets.at(-1)!.value).toBe(count);
      expect(count).toBeGreaterThanOrEqual(4);
    });

    it('counts commits, and times search and bundle', async () => {
      const before = await scrape();
      const res = await owner.client.post('/api/v1/nodes', { path: 'ops/oncall.md', content: '# On call\n\nWho answers the pager this week.\n' });
      expectStatus(res, 201);
      const put = await owner.client.put(
        `/api/v1/nodes/${res.body.id}`,
        { content: '# On call\n\nWho answers the pager next week.\n' },
        { 'if-match': res.headers.get('etag')! },
      );
      expectStatus(put, 200);
      expectStatus(await owner.client.get('/api/v1/search?q=pager&mode=fts'), 200);
      expectStatus(await owner.client.get('/api/v1/search?q=pager'), 200);
      expectStatus(await owner.client.post('/api/v1/bundle', { intent: 'who answers the pager', budget_tokens: 500 }), 200);
      const after = await scrape();
      expect(after.types.get('cv_commits_total')).toBe('counter');
      expect(total(after.samples, 'cv_commits_total')).toBe(total(before.samples, 'cv_commits_total') + 2);
      expect(total(after.samples, 'cv_search_duration_seconds_count', { mode: 'fts' })).toBeGreaterThanOrEqual(
        total(before.samples, 'cv_search_duration_seconds_count', { mode: 'fts' }) + 1,
      );
      expect(total(after.samples, 'cv_search_duration_seconds_count')).toBeGreaterThanOrEqual(total(before.samples, 'cv_search_duration_seconds_count') + 2);
      expect(total(after.samples, 'cv_bundle_duration_seconds_count')).toBeGreaterThanOrEqual(total(before.samples, 'cv_bundle_duration_seconds_count') + 1);
      expect(find(after.samples, 'cv_bundle_duration_seconds_bucket').length).toBeGreaterThan(5);
    });

    it('shows the embeddings backlog, inbox waiters, background jobs and the process', async () => {
      // A long-poll that waits until the test ends it.
      const ac = new AbortController();
      const poll = fetch(`${url}/api/v1/inbox?wait=25`, {
        headers: { cookie: [...owner.client.cookies].map(([k, v]) => `${k}=${v}`).join('; ') },
        signal: ac.signal,
      }).catch(() => null);
      let m = await scrape();
      // The poll reaches the server in its own time: scrape until it is counted (or the test times out).
      while (total(m.samples, 'cv_inbox_waiters') < 1) m = await scrape();
      expect(total(m.samples, 'cv_inbox_waiters')).toBe(1);
      ac.abort();
      await poll;

      const backlog = find(m.samples, 'cv_embeddings_backlog');
      expect(backlog).toHaveLength(1);
      expect(backlog[0]!.value).toBeGreaterThanOrEqual(0);
      expect(m.types.get('cv_embeddings_backlog')).toBe('gauge');
      expect(find(m.samples, 'cv_embeddings_degraded')).toHaveLength(1);
      // The re-index job is in exactly one state.
      const states = find(m.samples, 'cv_job_state', { job: 'reindex' });
      expect(states.map((s) => s.labels.state).sort()).toEqual(['finished', 'none', 'pending', 'running']);
      expect(states.filter((s) => s.value === 1)).toHaveLength(1);
      expect(find(m.samples, 'cv_job_done', { job: 'reindex' })).toHaveLength(1);
      // Node's default metrics.
      expect(find(m.samples, 'process_cpu_user_seconds_total')).toHaveLength(1);
      expect(find(m.samples, 'nodejs_heap_size_used_bytes')).toHaveLength(1);
    });

    it('counts imports and their files, and shows the import queue', async () => {
      const before = await scrape();
      const res = await owner.client.post('/api/v1/import', {
        space: 'imported',
        files: [
          { path: 'a.md', content: '# A\n\nFirst.\n' },
          { path: 'b.md', content: '# B\n\nSecond.\n' },
          { path: 'c.txt', content: 'not markdown' },
        ],
      });
      expectStatus(res, 200);
      const after = await scrape();
      expect(after.types.get('cv_import_files_total')).toBe('counter');
      expect(total(after.samples, 'cv_import_files_total', { outcome: 'created' })).toBe(
        total(before.samples, 'cv_import_files_total', { outcome: 'created' }) + 2,
      );
      expect(total(after.samples, 'cv_imports_total', { status: 'done' })).toBe(total(before.samples, 'cv_imports_total', { status: 'done' }) + 1);
      expect(total(after.samples, 'cv_import_files_total', { outcome: 'skipped' })).toBe(
        total(before.samples, 'cv_import_files_total', { outcome: 'skipped' }) + 1,
      );
      expect(find(after.samples, 'cv_imports', { status: 'queued' })[0]?.value).toBe(0);
      expect(find(after.samples, 'cv_imports', { status: 'running' })[0]?.value).toBe(0);
    });

    it('counts lifecycle runs by trigger and mode', async () => {
      const before = await scrape();
      expectStatus(await owner.client.post('/api/v1/lifecycle/run', { mode: 'dry' }), 200);
      const after = await scrape();
      expect(total(after.samples, 'cv_lifecycle_runs_total', { trigger: 'manual', mode: 'dry' })).toBe(
        total(before.samples, 'cv_lifecycle_runs_total', { trigger: 'manual', mode: 'dry' }) + 1,
      );
      expect(after.types.get('cv_lifecycle_archived_pages_total')).toBe('counter');
    });

    it('never puts an id, a URL or a secret in a label', async () => {
      const agent = await createAgentWithKey(owner.client, [{ action: 'read' }]);
      const invite = `iv_${crypto.randomBytes(32).toString('base64url')}`;
      expect((await agent.client.get(`/api/v1/nodes/${pageId}`)).status).toBe(200);
      await new Client(url).get(`/invite/${invite}`);
      await new Client(url).get(`/nowhere/${invite}?token=${invite}`);
      const res = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
      const text = await res.text();
      for (const secret of [pageId, agent.key, agent.id, invite, TOKEN, owner.id, 'ops/runbook']) expect(text).not.toContain(secret);
      const routes = new Set(server.app.routeList.map((r) => r.slice(r.indexOf(' ') + 1)));
      const { samples } = parseMetrics(text);
      const seen = new Set(find(samples, 'cv_http_requests_total').map((s) => s.labels.route!));
      expect(seen).toContain('unmatched');
      expect(seen).toContain('/invite/:token');
      for (const r of seen) expect(r === 'unmatched' || routes.has(r), r).toBe(true);
    });
  });

  describe('request logs', () => {
    /** The log so far, once the server has written the lines of answers already received. */
    const logText = async () => {
      // pino writes the "request completed" line as the answer ends; a scrape round-trip after
      // it lets that write land before we read.
      await scrape();
      return lines.join('');
    };
    const completed = () =>
      lines
        .flatMap((l) => l.split('\n'))
        .filter(Boolean)
        .map((l) => JSON.parse(l) as { msg: string; reqId: string; res?: { statusCode: number; principal?: string }; req?: { url: string } })
        .filter((l) => l.msg === 'request completed');

    it('names the principal by id on each finished request, for sessions and agent keys', async () => {
      const agent = await createAgentWithKey(owner.client, [{ action: 'read' }]);
      const me = await agent.client.get('/api/v1/me');
      expectStatus(me, 200);
      expectStatus(await owner.client.get(`/api/v1/nodes/${pageId}`), 200);
      await logText();
      const done = completed();
      expect(done.some((l) => l.res?.principal === agent.id)).toBe(true);
      expect(done.some((l) => l.res?.principal === owner.id)).toBe(true);
      // An anonymous request has none.
      expect(done.filter((l) => l.res?.statusCode === 401).every((l) => l.res?.principal === undefined)).toBe(true);
    });

    it('names the principal on git requests too (the git face authenticates by itself)', async () => {
      const gitter = await signupHuman(url, 'Gil');
      expectStatus(await gitter.client.post('/api/auth/stepup', { password: PASSWORD }), 200);
      const minted = await gitter.client.post('/api/v1/me/git-tokens', { name: 'log principal' });
      expectStatus(minted, 201);
      const basic = `Basic ${Buffer.from(`x:${minted.body.token as string}`).toString('base64')}`;
      const refs = await fetch(`${url}/git/${gitter.workspace.slug}.git/info/refs?service=git-upload-pack`, { headers: { authorization: basic } });
      expect(refs.status).toBe(200);
      await refs.arrayBuffer();
      await logText();
      // "request completed" lines carry the answer; the URL is on the request's first line.
      const gitIds = new Set(
        lines
          .flatMap((l) => l.split('\n'))
          .filter(Boolean)
          .map((l) => JSON.parse(l) as { reqId?: string; req?: { url: string } })
          .filter((l) => l.req?.url?.startsWith(`/git/${gitter.workspace.slug}.git/`))
          .map((l) => l.reqId),
      );
      const gitLines = completed().filter((l) => gitIds.has(l.reqId));
      expect(gitLines.length).toBeGreaterThan(0);
      expect(gitLines.some((l) => l.res?.principal === gitter.id)).toBe(true);
    });

    it('never logs a secret: keys, sessions, git Basic credentials, invite tokens, OAuth codes, the metrics token', async () => {
      const agent = await createAgentWithKey(owner.client, [{ action: 'read' }]);
      const wrongKey = `ak_${crypto.randomBytes(32).toString('base64url')}`;
      const invite = await owner.client.post(`/api/v1/workspaces/${owner.workspace.slug}/invites`, { role: 'viewer' });
      expectStatus(invite, 201);
      const inviteToken: string = invite.body.token;
      const oauthCode = `oac_${crypto.randomBytes(32).toString('base64url')}`;
      const verifier = crypto.randomBytes(32).toString('base64url');

      expectStatus(await agent.client.get('/api/v1/me'), 200);
      expect((await new Client(url, wrongKey).get('/api/v1/me')).status).toBe(401);
      // Secrets where they belong (headers) and where they do not (paths, queries).
      await new Client(url).get(`/invite/${inviteToken}`);
      await new Client(url).get(`/api/v1/invites/${inviteToken}`);
      const joiner = await signupHuman(url, 'Jo');
      // A git token for the joiner's own (empty) workspace, minted before the invite moves them.
      expect((await joiner.client.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);
      const git = await joiner.client.post('/api/v1/me/git-tokens', { name: 'log test' });
      expectStatus(git, 201);
      const gitToken: string = git.body.token;
      const basic = `Basic ${Buffer.from(`x:${gitToken}`).toString('base64')}`;
      const cloned = await fetch(`${url}/git/${joiner.workspace.slug}.git/info/refs?service=git-upload-pack`, { headers: { authorization: basic } });
      expect(cloned.status).toBe(200);
      await cloned.arrayBuffer();
      await (await fetch(`${url}/oauth/authorize?response_type=code&client_id=nobody&code=${oauthCode}&code_verifier=${verifier}&state=s1`)).text();
      const token = await fetch(`${url}/oauth/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: `grant_type=authorization_code&code=${oauthCode}&code_verifier=${verifier}&client_id=nobody`,
      });
      await token.text();
      await joiner.client.post(`/api/v1/invites/${inviteToken}/accept`);
      await new Client(url).get(`/api/v1/nodes/${agent.key}`);
      await new Client(url).get(`/api/v1/search?q=x&access_token=${agent.key}`);
      expect((await new Client(url).get('/metrics', { authorization: 'Bearer not-the-token-at-all' })).status).toBe(401);

      const log = await logText();
      const session = owner.client.cookies.get('svc_session')!;
      const csrf = owner.client.csrf!;
      const secrets = { agentKey: agent.key, wrongKey, inviteToken, gitToken, basic, oauthCode, verifier, session, csrf, metricsToken: TOKEN };
      for (const [what, secret] of Object.entries(secrets)) expect(log.includes(secret), `${what} is in the log`).toBe(false);
      // The lines are there, with the secret parts redacted.
      expect(log).toContain('/invite/[redacted]');
      expect(log).toContain('/api/v1/invites/[redacted]/accept');
      expect(log).toContain('code=[redacted]');
      expect(log).toContain(`/git/${joiner.workspace.slug}.git/info/refs`);
      expect(log).toContain('/api/v1/nodes/ak_[redacted]');
      expect(log).not.toMatch(/authorization/i);
    });
  });
});
