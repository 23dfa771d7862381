import { describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { expectStatus } from '../support/expect.js';
import { signupHuman, startTestServer } from '../support/server.js';

/**
 * Reads' touches are written in one statement per 5,000 pages (core/touches.ts), on both
 * engines: every page touched gets its own time, across statements, and ids of pages gone since
 * are passed over.
 */
describe.each(testEngines())('touch flush (%s)', (engine) => {
  it('6,002 touches in one flush: each page written has the time of its own touch', async () => {
    const s = await startTestServer(engine);
    try {
      const h = await signupHuman(s.url, 'Toucher');
      const ids: string[] = [];
      for (const n of [1, 2]) {
        const r = await h.client.post('/api/v1/nodes', { path: `touch/p${n}.md`, content: `# P${n}\n` });
        expectStatus(r, 201);
        ids.push(r.body.id as string);
      }
      await s.ctx.touches.flush();
      // Two real pages, one at each end of the batch, around 6,000 ids of no page.
      s.ctx.touches.touch(ids[0]!, '2026-01-01T00:00:00.001Z');
      for (let i = 0; i < 6_000; i++) s.ctx.touches.touch(`pg_gone_${i}`, '2026-01-01T00:00:01.000Z');
      s.ctx.touches.touch(ids[1]!, '2026-01-01T00:00:02.002Z');
      await s.ctx.touches.flush();
      const rows = await s.ctx.store.db.selectFrom('pages').select(['id', 'last_touched_at']).where('id', 'in', ids).orderBy('id').execute();
      const at = new Map(rows.map((r) => [r.id, r.last_touched_at]));
      expect(at.get(ids[0]!)).toBe('2026-01-01T00:00:00.001Z');
      expect(at.get(ids[1]!)).toBe('2026-01-01T00:00:02.002Z');
      expect(s.ctx.touches.peek(ids[1]!)).toBeUndefined();
    } finally {
      await s.stop();
    }
  }, 60_000);
});
