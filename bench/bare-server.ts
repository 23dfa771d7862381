/**
 * The baseline for the read benchmark: a plain Fastify 5 app with the service's logger settings
 * and one GET route answering a JSON object of the same size as a page record. No auth, no
 * database, no schema: what Fastify costs by itself on this machine.
 *
 * Env: PORT, HOST (default 127.0.0.1), LOG_LEVEL (default warn), BARE_PAYLOAD_FILE (JSON object
 * to answer; a synthetic ~2 KB record when absent).
 */
import fs from 'node:fs';
import Fastify from 'fastify';

function payload(): Record<string, unknown> {
  const file = process.env.BARE_PAYLOAD_FILE;
  if (file) return JSON.parse(fs.readFileSync(file, 'utf8')) as Record<string, unknown>;
  const body = Array.from({ length: 24 }, (_, i) => `Line ${i} of a typical page, with some words in it to fill space.`).join('\n');
  return { id: 'pg_bare', path: 'eng/notes/bare.md', title: 'Bare', content: body, body, tags: ['a', 'b'], links: [] };
}

const record = payload();
const app = Fastify({ logger: { level: process.env.LOG_LEVEL ?? 'warn' } });
app.get('/api/v1/nodes/:id', async () => record);

const port = Number(process.env.PORT ?? 0);
const host = process.env.HOST ?? '127.0.0.1';
await app.listen({ port, host });

const stop = () => {
  app.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
