import fs from 'node:fs';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningServer } from '../../src/server.js';
import { createTestDatabase, testEngines, type TestDatabase } from '../support/engines.js';
import { expectSingleLine } from '../support/lines.js';
import { ALL, Client, createAgentWithKey, createReaderAgent, signupHuman, startServerOn, type Res } from '../support/server.js';
import { commitAll, GitHome, gitUrl, mintGitToken, said, writeFile } from '../git/support.js';

/**
 * Attack session t, on commit 6dd666e (issue 18: PostgreSQL page writes carry the writes whose
 * results nobody reads as data-modifying CTEs in front of the next statement; the lock's round
 * trip also reads the newest commit seq and whether a create's path is free; a tree's delta chain
 * root is remembered in memory). Real HTTP against started servers, both engines; on PostgreSQL
 * two nodes (two servers of this process) on one database.
 *
 * FOUND:
 * - On PostgreSQL a page with more than about 7,280 distinct links (7,300 `[[tN]]` links: 73 KB,
 *   far under the 1 MiB page limit) can no longer be written: its page_links inserts (200 rows of
 *   9 parameters each) are all carried into the one statement of the watchers' lookup
 *   (persist.ts recordPageChange → deliverWatchEvents → executeCarrying), whose parameters pass
 *   65,535, the most a PostgreSQL Bind message can count (an Int16). PostgreSQL answers 08P01
 *   "bind message has 189 parameter formats but 0 parameters" and the client gets 503
 *   `unavailable` (a retry fails the same way). Before the change each batch was its own
 *   statement: 201. The same for updates (PUT) to such content. Tests: "a page with 7,300
 *   distinct links …" (create and update).
 * Held (both engines; the same file passes whole on 6dd666e~1): same-path creates racing on two
 *   nodes, with a move into the path and a delete + re-create: one winner a round, the rest 409
 *   already_exists, losers leave no commit, version row or audit entry; eight writers on two nodes
 *   (create, If-Match update, stale If-Match, move, archive/restore, delete) with git pushes
 *   interleaved: every acknowledged write in its page's history, one line of commits, the audit
 *   chain whole, a version row for every commit, the clone passes `git fsck --full --strict` and
 *   equals the live pages; hostile inputs answer 2xx/4xx and a refused write leaves nothing;
 *   watches deliver one coalesced event per page with the right action, commit and actor, none to
 *   a watcher below the page or to the actor; links by name resolve whichever of linker and target
 *   comes first (at once on two nodes too, and after a delete + re-create), a link in a
 *   confidential block stays hidden from an internal reader; grants still refuse creates outside
 *   them; the path check answers a hidden page exactly as before (409 already_exists); 210 updates
 *   in one folder (three rebases at depth 64) across a restart of every node: fsck clean, every
 *   version readable by git and by `?at=`.
 */

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.each(testEngines())('attack session t: carried writes under the workspace lock (%s)', (engine) => {
  let tdb: TestDatabase;
  const nodes: RunningServer[] = [];
  let owner: Client;
  let key: string;
  let agentId: string;
  let workspaceId: string;
  let slug: string;
  let gitToken: string;
  const g = new GitHome();

  beforeAll(async () => {
    tdb = await createTestDatabase(engine);
    nodes.push(await startServerOn(tdb));
    if (engine === 'postgres') nodes.push(await startServerOn(tdb));
    const h = await signupHuman(nodes[0]!.url, 'Tess');
    owner = h.client;
    workspaceId = h.workspace.id;
    slug = h.workspace.slug;
    const a = await createAgentWithKey(
      owner,
      ALL.map((action) => ({ action })),
      { name: 'writer' },
    );
    key = a.key;
    agentId = a.id;
    gitToken = (await mintGitToken(owner, { name: 'attack-t' })).token;
    // The workspace has a first commit before anything is attacked.
    const first = await new Client(nodes[0]!.url, key).post('/api/v1/nodes', { path: 'base/start/first.md', content: '# First\n' });
    expect(first.status).toBe(201);
  }, 60_000);
  afterAll(async () => {
    for (const n of nodes) await n.close();
    await tdb?.cleanup();
    g.cleanup();
  });

  const on = (k: number) => new Client(nodes[k % nodes.length]!.url, key);
  const db = () => nodes[0]!.ctx.store.db;

  /** What a write leaves behind, counted from the database. */
  const counts = async () => {
    const n = async (q: ReturnType<typeof sql<{ n: number | string }>>) => Number((await q.execute(db())).rows[0]!.n);
    return {
      commits: await n(sql`select count(*) as n from commits where workspace_id = ${workspaceId}`),
      versions: await n(sql`select count(*) as n from page_versions where workspace_id = ${workspaceId}`),
      audit: await n(sql`select count(*) as n from audit_log where workspace_id = ${workspaceId} and action like 'page.%'`),
      pages: await n(sql`select count(*) as n from pages where workspace_id = ${workspaceId}`),
    };
  };
  const mainSha = async () =>
    (await sql<{ sha: string }>`select sha from git_refs where workspace_id = ${workspaceId} and name = 'refs/heads/main'`.execute(db())).rows[0]?.sha;
  const byPath = async (p: string) => {
    const pages = (await sql<{ n: number | string }>`select count(*) as n from pages where workspace_id = ${workspaceId} and path = ${p}`.execute(db()))
      .rows[0]!.n;
    const versions = (
      await sql<{ n: number | string }>`select count(*) as n from page_versions where workspace_id = ${workspaceId} and path = ${p}`.execute(db())
    ).rows[0]!.n;
    const audit = (
      await sql<{
        n: number | string;
      }>`select count(*) as n from audit_log where workspace_id = ${workspaceId} and detail like ${`%${JSON.stringify(p).slice(1, -1)}%`}`.execute(db())
    ).rows[0]!.n;
    return { pages: Number(pages), versions: Number(versions), audit: Number(audit) };
  };

  /**
   * The whole workspace agrees with itself: one line of commits, the audit chain whole, every
   * commit has the page_versions rows of the pages it changed (and every version row its commit),
   * every live page's row names the commit of its newest version.
   */
  const expectConsistent = async () => {
    const line = await expectSingleLine(db(), workspaceId);
    const orphanVersions = (
      await sql<{ seq: number; sha: string }>`select v.commit_seq as seq, v.commit_sha as sha from page_versions v
        left join commits c on c.workspace_id = v.workspace_id and c.seq = v.commit_seq and c.sha = v.commit_sha
        where v.workspace_id = ${workspaceId} and c.sha is null`.execute(db())
    ).rows;
    expect(orphanVersions, 'version rows without their commit').toEqual([]);
    const bare = (
      await sql<{ seq: number; message: string }>`select c.seq, c.message from commits c
        where c.workspace_id = ${workspaceId} and not exists (select 1 from page_versions v where v.workspace_id = c.workspace_id and v.commit_seq = c.seq)`.execute(
        db(),
      )
    ).rows;
    expect(bare, 'commits without any version row').toEqual([]);
    const stale = (
      await sql<{ path: string }>`select p.path from pages p where p.workspace_id = ${workspaceId} and p.commit_sha <> (
        select v.commit_sha from page_versions v where v.page_id = p.id order by v.commit_seq desc limit 1)`.execute(db())
    ).rows;
    expect(stale, 'pages whose row is not at their newest version').toEqual([]);
    return line;
  };

  /** Clones main, runs `git fsck --full`, and compares every file to the live pages. */
  const expectCloneMatches = async (via = 0) => {
    const dir = g.path('clone');
    await g.ok(['clone', '-q', gitUrl(nodes[via % nodes.length]!.url, slug, gitToken), dir]);
    await g.ok(['fsck', '--full', '--strict'], { cwd: dir });
    const files = (await g.ok(['ls-files', '-z'], { cwd: dir })).split('\0').filter(Boolean).sort();
    const live = (
      await sql<{
        path: string;
        content: string;
      }>`select path, content from pages where workspace_id = ${workspaceId} and deleted_at is null order by path`.execute(db())
    ).rows;
    expect(files).toEqual(live.map((p) => p.path).sort());
    for (const p of live) expect(fs.readFileSync(path.join(dir, p.path), 'utf8'), p.path).toBe(p.content);
    return dir;
  };

  const historyShas = async (id: string) => {
    const r = await owner.get(`/api/v1/nodes/${id}/history?limit=200`);
    expect(r.status, r.text.slice(0, 200)).toBe(200);
    return (r.body.versions as { commit_sha: string }[]).map((v) => v.commit_sha);
  };

  const no5xx = (r: Res, what: string) => expect(r.status, `${what}: ${r.status} ${r.text.slice(0, 300)}`).toBeLessThan(500);

  /* -------------------------------------------------------------------------------------- */

  it('same path, both nodes: eight creates at once, then creates racing a move into the path, then delete + re-create racing creates: one winner a round, the rest 409 already_exists, losers leave nothing', async () => {
    const before = await counts();
    let successes = 0;
    const target = 'race/same/spot.md';
    // Round 1: eight creates.
    const r1 = await Promise.all(Array.from({ length: 8 }, (_, k) => on(k).post('/api/v1/nodes', { path: target, content: `# Spot\n\nwriter ${k}\n` })));
    expect(r1.map((r) => r.status).sort()).toEqual([201, 409, 409, 409, 409, 409, 409, 409]);
    for (const r of r1.filter((x) => x.status === 409)) expect(r.body.code).toBe('already_exists');
    successes += 1;
    const winner = r1.find((r) => r.status === 201)!.body;

    // Round 2: the page moves away; then creates race a move of another page into the path.
    const away = await on(0).post(`/api/v1/nodes/${winner.id}/move`, { to: 'race/same/moved-away.md' });
    expect(away.status, away.text).toBe(200);
    successes += 1;
    const mover = await on(1).post('/api/v1/nodes', { path: 'race/same/mover.md', content: '# Mover\n' });
    expect(mover.status).toBe(201);
    successes += 1;
    const r2 = await Promise.all([
      ...Array.from({ length: 6 }, (_, k) => on(k).post('/api/v1/nodes', { path: target, content: `# Spot again\n\nwriter ${k}\n` })),
      on(3).post(`/api/v1/nodes/${mover.body.id}/move`, { to: target }),
      ...Array.from({ length: 3 }, (_, k) => on(k + 1).post('/api/v1/nodes', { path: target, content: `# Spot late\n\nwriter ${k}\n` })),
    ]);
    for (const r of r2) no5xx(r, 'round 2');
    const won2 = r2.filter((r) => r.status === 200 || r.status === 201);
    expect(won2, r2.map((r) => `${r.status} ${r.text.slice(0, 80)}`).join('\n')).toHaveLength(1);
    for (const r of r2.filter((x) => x.status >= 400)) {
      expect(r.status).toBe(409);
      expect(r.body.code).toBe('already_exists');
    }
    successes += 1;

    // Round 3: delete the holder and re-create at once, with creates racing both.
    const holder = (await on(0).get(`/api/v1/nodes/${encodeURIComponent(target)}`)).body;
    const r3 = await Promise.all([
      on(0).delete(`/api/v1/nodes/${holder.id}`),
      ...Array.from({ length: 6 }, (_, k) => on(k).post('/api/v1/nodes', { path: target, content: `# Spot third\n\nwriter ${k}\n` })),
    ]);
    for (const r of r3) no5xx(r, 'round 3');
    expect([200, 204]).toContain(r3[0]!.status);
    successes += 1;
    const created3 = r3.slice(1).filter((r) => r.status === 201);
    // The delete may land before or after some creates: at most one create wins, and one does if the delete went first.
    expect(created3.length).toBeLessThanOrEqual(1);
    for (const r of r3.slice(1).filter((x) => x.status !== 201)) {
      expect(r.status).toBe(409);
      expect(r.body.code).toBe('already_exists');
    }
    successes += created3.length;
    if (created3.length === 0) {
      const again = await on(1).post('/api/v1/nodes', { path: target, content: '# Spot fourth\n' });
      expect(again.status).toBe(201);
      successes += 1;
    }

    const after = await counts();
    expect(after.commits - before.commits, 'one commit per successful write, none for a loser').toBe(successes);
    expect(after.versions - before.versions).toBe(successes);
    expect(after.audit - before.audit).toBe(successes);
    // Exactly one live page holds the path, and the versions at it are those of the winners.
    const live = (await sql<{ id: string }>`select id from pages where workspace_id = ${workspaceId} and path = ${target} and deleted_at is null`.execute(db()))
      .rows;
    expect(live).toHaveLength(1);
    await expectConsistent();
  }, 60_000);

  /* -------------------------------------------------------------------------------------- */

  it('history under concurrency on both nodes: creates, If-Match updates, moves, archive/restore, deletes and git pushes interleaved: every acknowledged write is in its page history, one line, the clone passes fsck and equals the pages', async () => {
    const acked: { id: string; sha: string; what: string }[] = [];
    const failures: string[] = [];
    const note = (r: Res, what: string, ok: number[] = [200, 201]) => {
      if (!ok.includes(r.status)) failures.push(`${what}: ${r.status} ${r.text.slice(0, 200)}`);
      return ok.includes(r.status);
    };
    const writer = async (k: number) => {
      const c = on(k);
      for (let i = 0; i < 4; i++) {
        const p = `hist/w${k}/p${i}.md`;
        const cr = await c.post('/api/v1/nodes', { path: p, content: `# W${k} P${i}\n\nfirst ${k}-${i} [[p${(i + 1) % 4}]]\n` });
        if (!note(cr, `create ${p}`)) continue;
        const id = cr.body.id as string;
        acked.push({ id, sha: cr.body.commit_sha, what: `create ${p}` });
        const up = await c.put(`/api/v1/nodes/${id}`, { content: `# W${k} P${i}\n\nsecond ${k}-${i}\n` }, { 'if-match': cr.headers.get('etag')! });
        if (note(up, `update ${p}`)) acked.push({ id, sha: up.body.commit_sha, what: `update ${p}` });
        // A stale If-Match is refused or merged, never a 5xx, never a lost write.
        const stale = await c.put(`/api/v1/nodes/${id}`, { content: `# W${k} P${i}\n\nstale ${k}-${i}\n` }, { 'if-match': cr.headers.get('etag')! });
        no5xx(stale, `stale update ${p}`);
        if (stale.status === 200 && stale.body.changed) acked.push({ id, sha: stale.body.commit_sha, what: `stale update ${p}` });
        if (i === 1) {
          const mv = await c.post(`/api/v1/nodes/${id}/move`, { to: `hist/w${k}/moved/p${i}.md` });
          if (note(mv, `move ${p}`)) acked.push({ id, sha: mv.body.commit_sha, what: `move ${p}` });
        }
        if (i === 2) {
          const ar = await c.post(`/api/v1/nodes/${id}/archive`, { reason: 'manual' });
          if (note(ar, `archive ${p}`)) acked.push({ id, sha: ar.body.commit_sha, what: `archive ${p}` });
          const rs = await on(k + 1).post(`/api/v1/nodes/${id}/restore`, {});
          if (note(rs, `restore ${p}`)) acked.push({ id, sha: rs.body.commit_sha, what: `restore ${p}` });
        }
        if (i === 3) {
          const d = await on(k + 1).delete(`/api/v1/nodes/${id}`);
          if (note(d, `delete ${p}`, [200, 204])) acked.push({ id, sha: d.body.commit_sha, what: `delete ${p}` });
        }
      }
    };
    const pushed: { path: string; sha: string }[] = [];
    const pusher = async () => {
      const dir = g.path('push');
      await g.ok(['clone', '-q', gitUrl(nodes[0]!.url, slug, gitToken), dir]);
      for (let n = 0; n < 3; n++) {
        writeFile(dir, `hist/pushed/p${n}.md`, `# Pushed ${n}\n\nfrom git [[p0]]\n`);
        let sha = await commitAll(g, dir, `push ${n}`);
        for (let attempt = 0; ; attempt++) {
          const r = await g.git(['push', '-q', gitUrl(nodes[(n + 1) % nodes.length]!.url, slug, gitToken), 'main'], { cwd: dir });
          if (r.code === 0) break;
          const out = said(r);
          // Main moved under the push (REST writes): fetch, rebase, push again. Anything else is a failure.
          if (!/main has moved|fetch first|non-fast-forward|rejected/i.test(out) || attempt > 20) {
            failures.push(`push ${n}: ${out.slice(0, 400)}`);
            return;
          }
          await g.ok(['pull', '-q', '--rebase', gitUrl(nodes[0]!.url, slug, gitToken), 'main'], { cwd: dir });
          sha = (await g.ok(['rev-parse', 'HEAD'], { cwd: dir })).trim();
          await sleep(20);
        }
        pushed.push({ path: `hist/pushed/p${n}.md`, sha });
      }
    };
    await Promise.all([...Array.from({ length: 8 }, (_, k) => writer(k)), pusher()]);
    expect(failures).toEqual([]);
    expect(pushed).toHaveLength(3);

    for (const a of acked) expect(await historyShas(a.id), a.what).toContain(a.sha);
    for (const p of pushed) {
      const page = await owner.get(`/api/v1/nodes/${encodeURIComponent(p.path)}`);
      expect(page.status).toBe(200);
      expect(await historyShas(page.body.id), p.path).toContain(p.sha);
    }
    await expectConsistent();
    const verify = await owner.get('/api/v1/audit/verify');
    expect(verify.body).toMatchObject({ ok: true, first_broken: null });
    await expectCloneMatches(1);
  }, 90_000);

  /* -------------------------------------------------------------------------------------- */

  it('hostile inputs (NUL bytes, lone surrogates, thousands of tags, a path at the length limit, frontmatter edge cases, a page at the size limit): 2xx or 4xx, never 5xx, and a refused write leaves nothing', async () => {
    const seg = 'é'.repeat(99);
    const longPath = `h/${[seg, seg, seg, seg, seg].join('/')}/${'x'.repeat(5)}.md`.slice(0, 512);
    const tagList = Array.from({ length: 3000 }, (_, i) => `tag${i}`).join(', ');
    const big = `# Big\n\n${'lorem ipsum dolor sit amet '.repeat(Math.floor((1024 * 1024 - 200) / 27))}\n`;
    const cases: { path: string; content: string }[] = [
      { path: 'hostile/a/nul-body.md', content: '# Nul\n\nbefore\u0000after\n' },
      { path: 'hostile/a/nul-title.md', content: '---\ntitle: "a\\0b"\n---\nbody\n' },
      { path: 'hostile/a/surrogate.md', content: '# Lone \ud800 surrogate\n\n\udfff text [[\ud800]]\n' },
      { path: 'hostile/a/tags.md', content: `---\ntags: [${tagList}]\n---\n# Tags\n` },
      { path: longPath, content: '# Long path\n\n[[h]]\n' },
      { path: 'hostile/a/empty-fm.md', content: '---\n---\n' },
      { path: 'hostile/a/fm-list-title.md', content: '---\ntitle: [1, 2]\nsensitivity: bogus\n---\n# x\n' },
      { path: 'hostile/a/fm-bad-yaml.md', content: '---\n: : :\n  - [\n---\n# x\n' },
      { path: 'hostile/a/fm-alias.md', content: '---\na: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: &c [*b, *b, *b, *b]\ntags: *c\n---\n# alias\n' },
      { path: 'hostile/a/fm-archived.md', content: '---\nstate: archived\narchived_reason: manual\n---\n# archived from birth\n' },
      { path: 'hostile/a/dollar.md', content: "# $1 $$ $x$ '$2' -- $3 /* $4\n\n[[$1]] [[it's]] [[a--b]] [[c/*d]]\n" },
      { path: 'hostile/a/big.md', content: big },
      { path: 'hostile/a/too-big.md', content: big + 'x'.repeat(400) },
    ];
    for (const [k, c] of cases.entries()) {
      const before = await counts();
      const head = await mainSha();
      const r = await on(k).post('/api/v1/nodes', c);
      no5xx(r, c.path.slice(0, 40));
      const after = await counts();
      if (r.status === 201) {
        expect(after.commits - before.commits, c.path).toBe(1);
        expect(after.versions - before.versions, c.path).toBe(1);
        // And it can be read back and updated (an update rides with the index's other statement).
        const back = await on(k + 1).get(`/api/v1/nodes/${r.body.id}`);
        expect(back.status).toBe(200);
        const up = await on(k + 1).put(`/api/v1/nodes/${r.body.id}`, { content: `${c.content}\nmore\n` }, { 'if-match': r.headers.get('etag')! });
        no5xx(up, `update ${c.path.slice(0, 40)}`);
      } else {
        expect(after, `refused ${c.path.slice(0, 40)} (${r.status}) left something`).toEqual(before);
        expect(await mainSha()).toBe(head);
      }
    }
    await expectConsistent();
  }, 60_000);

  /* -------------------------------------------------------------------------------------- */

  const manyLinks = (n: number, prefix: string) => `# Many links\n\n${Array.from({ length: n }, (_, i) => `[[${prefix}${i}]]`).join(' ')}\n`;

  it('a page with 7,300 distinct links (73 KB, far under the 1 MiB page limit) is created, as before the change (201, every link stored)', async () => {
    const before = await counts();
    const r = await on(0).post('/api/v1/nodes', { path: 'links/many/created.md', content: manyLinks(7300, 'c') });
    // Whatever it answered, the history agrees with the answer.
    const after = await counts();
    expect(after.commits - before.commits).toBe(r.status === 201 ? 1 : 0);
    expect(await byPath('links/many/created.md')).toEqual(r.status === 201 ? { pages: 1, versions: 1, audit: 1 } : { pages: 0, versions: 0, audit: 0 });
    await expectConsistent();
    expect(r.status, `${r.status} ${r.text.slice(0, 300)}`).toBe(201);
    const n = await sql<{ n: number | string }>`select count(*) as n from page_links where source_id = ${r.body.id}`.execute(db());
    expect(Number(n.rows[0]!.n)).toBe(7300);
  }, 60_000);

  it('a page updated to 7,300 distinct links is updated, as before the change (200), and a refused update leaves the page as it was', async () => {
    const cr = await on(1).post('/api/v1/nodes', { path: 'links/many/updated.md', content: '# Few links\n\n[[one]]\n' });
    expect(cr.status).toBe(201);
    const before = await counts();
    const up = await on(1).put(`/api/v1/nodes/${cr.body.id}`, { content: manyLinks(7300, 'u') }, { 'if-match': cr.headers.get('etag')! });
    const after = await counts();
    expect(after.commits - before.commits).toBe(up.status === 200 ? 1 : 0);
    expect(after.versions - before.versions).toBe(up.status === 200 ? 1 : 0);
    if (up.status !== 200) {
      const still = await on(0).get(`/api/v1/nodes/${cr.body.id}`);
      expect(still.body.content).toBe('# Few links\n\n[[one]]\n');
      expect(still.body.commit_sha).toBe(cr.body.commit_sha);
    }
    await expectConsistent();
    expect(up.status, `${up.status} ${up.text.slice(0, 300)}`).toBe(200);
  }, 60_000);

  /* -------------------------------------------------------------------------------------- */

  it('watches after the carrying change: one page_changed event per change with the right fields, coalesced per page; a watcher below the page ceiling gets nothing; the actor nothing', async () => {
    const seed = await on(0).post('/api/v1/nodes', { path: 'watch/f/seed.md', content: '# Seed\n' });
    expect(seed.status).toBe(201);
    const b = await createReaderAgent(owner, 'confidential');
    const lo = await createReaderAgent(owner, 'internal');
    const bClient = new Client(nodes[nodes.length - 1]!.url, b.key);
    const loClient = new Client(nodes[0]!.url, lo.key);
    for (const c of [bClient, loClient]) {
      const w = await c.put('/api/v1/watches', { path: 'watch/f' });
      expect(w.status, w.text).toBe(200);
    }
    const inbox = async (c: Client) => {
      const r = await c.get('/api/v1/inbox?state=unread&limit=100');
      expect(r.status).toBe(200);
      return (r.body.events as { seq: number; kind: string; page_id: string; payload: any }[]).filter((e) => e.kind === 'page_changed');
    };
    const ack = async (c: Client) => {
      const all = await c.get('/api/v1/inbox?state=all&limit=100');
      const top = Math.max(0, ...(all.body.events as { seq: number }[]).map((e) => e.seq));
      if (top > 0) expect((await c.post('/api/v1/inbox/ack', { up_to: top })).status).toBe(200);
    };

    const one = await on(0).post('/api/v1/nodes', { path: 'watch/f/one.md', content: '# One\n' });
    expect(one.status).toBe(201);
    let ev = await inbox(bClient);
    expect(ev).toHaveLength(1);
    expect(ev[0]!.page_id).toBe(one.body.id);
    expect(ev[0]!.payload).toMatchObject({ path: 'watch/f/one.md', title: 'One', action: 'create', commit_sha: one.body.commit_sha, changes: 1 });
    expect(ev[0]!.payload.actor.id).toBe(agentId);
    expect(await inbox(loClient)).toHaveLength(1);
    await ack(bClient);
    await ack(loClient);

    // A confidential page: the internal watcher is told nothing, ever.
    const conf = await on(1).post('/api/v1/nodes', { path: 'watch/f/conf.md', content: '---\nsensitivity: confidential\n---\n# Conf\n' });
    expect(conf.status).toBe(201);
    // Five updates of one page on both nodes: one unread event, five changes, the last commit.
    let etag = one.headers.get('etag')!;
    let last = '';
    for (let i = 0; i < 5; i++) {
      const u = await on(i).put(`/api/v1/nodes/${one.body.id}`, { content: `# One\n\nv${i}\n` }, { 'if-match': etag });
      expect(u.status).toBe(200);
      etag = u.headers.get('etag')!;
      last = u.body.commit_sha;
    }
    ev = await inbox(bClient);
    const byPage = new Map(ev.map((e) => [e.page_id, e]));
    expect(ev).toHaveLength(2);
    expect(byPage.get(conf.body.id)!.payload).toMatchObject({ action: 'create', commit_sha: conf.body.commit_sha, changes: 1 });
    expect(byPage.get(one.body.id)!.payload).toMatchObject({ action: 'update', commit_sha: last, changes: 5 });
    expect(await inbox(loClient)).toHaveLength(1);
    expect((await inbox(loClient))[0]!.page_id).toBe(one.body.id);
    await ack(bClient);
    await ack(loClient);

    // A move within the folder and a delete of the confidential page.
    const mv = await on(1).post(`/api/v1/nodes/${one.body.id}/move`, { to: 'watch/f/sub/one-moved.md' });
    expect(mv.status).toBe(200);
    const del = await on(0).delete(`/api/v1/nodes/${conf.body.id}`);
    expect([200, 204]).toContain(del.status);
    ev = await inbox(bClient);
    expect(ev).toHaveLength(2);
    const m = ev.find((e) => e.page_id === one.body.id)!;
    expect(m.payload).toMatchObject({ action: 'move', path: 'watch/f/sub/one-moved.md', from: 'watch/f/one.md', commit_sha: mv.body.commit_sha, changes: 1 });
    expect(ev.find((e) => e.page_id === conf.body.id)!.payload).toMatchObject({ action: 'delete', changes: 1 });
    const loEv = await inbox(loClient);
    expect(loEv.map((e) => e.page_id)).toEqual([one.body.id]);
    // The writer is never told of its own changes.
    const mine = await on(0).get('/api/v1/inbox?state=all&limit=100');
    expect((mine.body.events as { kind: string }[]).filter((e) => e.kind === 'page_changed')).toEqual([]);
    await expectConsistent();
  }, 60_000);

  /* -------------------------------------------------------------------------------------- */

  it('links by name: a target created after (and at once with) pages naming it becomes their target on both nodes; deleted and re-created, it is linked again; a link inside a confidential block stays hidden from an internal reader', async () => {
    const reader = await createReaderAgent(owner, 'internal');
    const rc = new Client(nodes[0]!.url, reader.key);
    const backlinks = async (ref: string, c: Client = on(0)) => {
      const r = await c.get(`/api/v1/nodes/${encodeURIComponent(ref)}/backlinks`);
      expect(r.status, r.text.slice(0, 200)).toBe(200);
      return (r.body.backlinks as { path: string }[]).map((x) => x.path).sort();
    };
    const early = await Promise.all(
      Array.from({ length: 4 }, (_, i) => on(i).post('/api/v1/nodes', { path: `lnk/a/early${i}.md`, content: `# Early ${i}\n\nsee [[zeta-target]]\n` })),
    );
    for (const r of early) expect(r.status).toBe(201);
    // Linkers and the target at once, on both nodes.
    const burst = await Promise.all([
      ...Array.from({ length: 8 }, (_, i) =>
        on(i).post('/api/v1/nodes', { path: `lnk/b/burst${i}.md`, content: `# Burst ${i}\n\nsee [[zeta-target]] and [[lnk/b/burst${(i + 1) % 8}.md]]\n` }),
      ),
      on(1).post('/api/v1/nodes', { path: 'lnk/t/zeta-target.md', content: '# Zeta target\n' }),
      on(0).post('/api/v1/nodes', {
        path: 'lnk/c/hidden-link.md',
        content: '# Hidden link\n\nopen words\n\n::: confidential\nsee [[zeta-target]]\n:::\n',
      }),
    ]);
    for (const r of burst) expect(r.status, r.text.slice(0, 200)).toBe(201);
    const all = [...early.map((_, i) => `lnk/a/early${i}.md`), ...Array.from({ length: 8 }, (_, i) => `lnk/b/burst${i}.md`)].sort();
    expect(await backlinks('lnk/t/zeta-target.md')).toEqual([...all, 'lnk/c/hidden-link.md'].sort());
    expect(await backlinks('lnk/t/zeta-target.md', rc)).toEqual(all);
    // Each burst page reaches the next one, whichever was created first.
    for (let i = 0; i < 8; i++) expect(await backlinks(`lnk/b/burst${(i + 1) % 8}.md`)).toContain(`lnk/b/burst${i}.md`);

    // Deleted: nobody links to it; re-created at the name: everyone does again.
    const t = (await on(0).get(`/api/v1/nodes/${encodeURIComponent('lnk/t/zeta-target.md')}`)).body;
    const d = await on(0).delete(`/api/v1/nodes/${t.id}`);
    expect([200, 204]).toContain(d.status);
    const again = await on(1).post('/api/v1/nodes', { path: 'lnk/t2/zeta-target.md', content: '# Zeta target again\n' });
    expect(again.status).toBe(201);
    expect(await backlinks(again.body.id)).toEqual([...all, 'lnk/c/hidden-link.md'].sort());
    expect(await backlinks(again.body.id, rc)).toEqual(all);
    const rel = await rc.get(`/api/v1/nodes/${encodeURIComponent('lnk/c/hidden-link.md')}/related`);
    expect(rel.status).toBe(200);
    expect(JSON.stringify(rel.body)).not.toContain('zeta-target');
    await expectConsistent();
  }, 60_000);

  /* -------------------------------------------------------------------------------------- */

  it('authorization: a create outside the write grant is refused and leaves nothing; the path check answers a hidden page as before the change (409 already_exists), a free path 201', async () => {
    const scoped = await createAgentWithKey(
      owner,
      [
        { action: 'read', scope: 'authz/open', ceiling: 'internal' },
        { action: 'write', scope: 'authz/open', ceiling: 'internal' },
      ],
      { ceiling: 'internal', name: 'scoped' },
    );
    const sc = new Client(nodes[nodes.length - 1]!.url, scoped.key);
    const before = await counts();
    const out = await sc.post('/api/v1/nodes', { path: 'authz/closed/x.md', content: '# X\n' });
    expect(out.status, out.text).toBe(403);
    expect(await counts()).toEqual(before);
    expect(await byPath('authz/closed/x.md')).toEqual({ pages: 0, versions: 0, audit: 0 });

    const hidden = await on(0).post('/api/v1/nodes', { path: 'authz/open/hidden.md', content: '---\nsensitivity: confidential\n---\n# Hidden\n' });
    expect(hidden.status).toBe(201);
    expect((await sc.get(`/api/v1/nodes/${encodeURIComponent('authz/open/hidden.md')}`)).status).toBe(404);
    const mid = await counts();
    const onHidden = await sc.post('/api/v1/nodes', { path: 'authz/open/hidden.md', content: '# Mine\n' });
    // 6dd666e~1 answered this exact request 409 already_exists (assertPathFree without a visibility check).
    expect(onHidden.status, onHidden.text).toBe(409);
    expect(onHidden.body.code).toBe('already_exists');
    expect(onHidden.text).not.toContain(hidden.body.id);
    expect(await counts()).toEqual(mid);
    const free = await sc.post('/api/v1/nodes', { path: 'authz/open/free.md', content: '# Free\n' });
    expect(free.status).toBe(201);
    // The same path raced from both nodes by the scoped agent: one 201, the rest 409, no 5xx.
    const race = await Promise.all(
      Array.from({ length: 6 }, (_, k) =>
        new Client(nodes[k % nodes.length]!.url, scoped.key).post('/api/v1/nodes', { path: 'authz/open/raced.md', content: `# R${k}\n` }),
      ),
    );
    expect(race.map((r) => r.status).sort()).toEqual([201, 409, 409, 409, 409, 409]);
    await expectConsistent();
  }, 60_000);

  /* -------------------------------------------------------------------------------------- */

  it('delta-chain rebase: 140 updates in one folder (rebased twice at depth 64), clone + fsck --full, every version readable; restart the nodes on the same database and 70 more: still consistent', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await on(i).post('/api/v1/nodes', { path: `chain/f/p${i}.md`, content: `# P${i}\n\nv0\n` });
      expect(r.status).toBe(201);
      ids.push(r.body.id);
    }
    const versions: { id: string; sha: string; content: string }[] = [];
    const update = async (k: number) => {
      const content = `# P${k % 5}\n\nversion ${k}\n`;
      const r = await on(k).put(`/api/v1/nodes/${ids[k % 5]}`, { content });
      expect(r.status, r.text.slice(0, 200)).toBe(200);
      versions.push({ id: ids[k % 5]!, sha: r.body.commit_sha, content });
    };
    for (let k = 1; k <= 140; k++) await update(k);
    const dir = await expectCloneMatches(0);
    // Every version, by git and by the API.
    for (const v of versions.filter((_, i) => i % 7 === 0)) {
      const p = (await on(0).get(`/api/v1/nodes/${v.id}`)).body.path as string;
      expect(await g.ok(['show', `${v.sha}:${p}`], { cwd: dir })).toBe(v.content);
      const at = await on(1).get(`/api/v1/nodes/${v.id}?at=${v.sha}`);
      expect(at.status).toBe(200);
      expect(at.body.content).toBe(v.content);
    }
    await expectConsistent();

    // Restart every node on the same database and data directory.
    const count = nodes.length;
    for (const n of nodes.splice(0)) await n.close();
    for (let i = 0; i < count; i++) nodes.push(await startServerOn(tdb));
    for (let k = 141; k <= 210; k++) await update(k);
    await expectCloneMatches(count - 1);
    await expectConsistent();
    // A version from before the restart and the rebases, read after them.
    const early = versions[3]!;
    const read = await on(0).get(`/api/v1/nodes/${early.id}?at=${early.sha}`);
    expect(read.body.content).toBe(early.content);
  }, 120_000);
});
