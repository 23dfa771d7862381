import fs from 'node:fs';
import type { FastifyInstance } from 'fastify';
import { createHash } from 'node:crypto';

/**
 * The web app's static files: hand-written ES modules and one stylesheet in src/web/assets,
 * read once at start and served from /assets/<name> (no build step, nothing from another
 * origin; the app pages' CSP allows scripts and styles from 'self' only). Each answer carries
 * an ETag so browsers revalidate cheaply; `no-cache` keeps a new release's files fresh.
 */

const TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
};

interface Asset {
  body: Buffer;
  type: string;
  etag: string;
}

function loadAssets(): Map<string, Asset> {
  const dir = new URL('../assets/', import.meta.url);
  const out = new Map<string, Asset>();
  for (const name of fs.readdirSync(dir)) {
    const ext = name.slice(name.lastIndexOf('.'));
    const type = TYPES[ext];
    if (!type) continue;
    const body = fs.readFileSync(new URL(name, dir));
    out.set(name, { body, type, etag: `"${createHash('sha256').update(body).digest('hex').slice(0, 32)}"` });
  }
  return out;
}

export async function assetRoutes(web: FastifyInstance): Promise<void> {
  const assets = loadAssets();
  const opts = { config: { auth: 'public' as const }, schema: { hide: true } };
  web.get('/assets/:name', opts, async (req, reply) => {
    const a = assets.get((req.params as { name: string }).name);
    if (!a) return reply.code(404).type('text/plain; charset=utf-8').send('Not found');
    reply.header('cache-control', 'no-cache').header('etag', a.etag).header('x-content-type-options', 'nosniff');
    if (req.headers['if-none-match'] === a.etag) return reply.code(304).send();
    return reply.type(a.type).send(a.body);
  });
}
