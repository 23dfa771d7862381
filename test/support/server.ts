import { loadConfig } from '../../src/config.js';
import type { Dialect } from '../../src/store/db.js';
import { startServer, type RunningServer } from '../../src/server.js';
import { createTestDatabase } from './engines.js';

export interface TestServer extends RunningServer {
  engine: Dialect;
  /** Stops the server and drops its database. */
  stop(): Promise<void>;
}

/** Starts a real server on a free loopback port over a fresh database. */
export async function startTestServer(engine: Dialect, env: Record<string, string> = {}): Promise<TestServer> {
  const tdb = await createTestDatabase(engine);
  const server = await startServerOn(tdb, env);
  return {
    ...server,
    engine,
    stop: async () => {
      await server.close();
      await tdb.cleanup();
    },
  };
}

/**
 * Starts a server over an existing database: a second node of the same deployment, or the
 * same node after a restart. Limits are off unless `env` turns them on.
 */
export async function startServerOn(db: { dataDir: string; databaseUrl: string | undefined }, env: Record<string, string> = {}): Promise<RunningServer> {
  const config = loadConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    DATA_DIR: db.dataDir,
    LOG_LEVEL: 'silent',
    // Suites sign up many users from one IP; the limits suite turns limits on explicitly.
    RATE_LIMITS: 'off',
    ...(db.databaseUrl ? { DATABASE_URL: db.databaseUrl } : {}),
    ...env,
  });
  return startServer(config, { logger: false });
}

export interface Res<T = any> {
  status: number;
  headers: Headers;
  body: T;
  text: string;
}

/** A minimal HTTP client: JSON in and out, and a cookie jar for sessions. */
export class Client {
  cookies = new Map<string, string>();
  /** Sent as X-Service-Workspace on every request when set. */
  workspace: string | undefined;
  constructor(
    readonly base: string,
    public bearer?: string,
  ) {}

  get csrf(): string | undefined {
    return this.cookies.get('svc_csrf');
  }

  async request<T = any>(
    method: string,
    path: string,
    opts: { json?: unknown; body?: string | Buffer; headers?: Record<string, string>; csrf?: boolean } = {},
  ): Promise<Res<T>> {
    const headers: Record<string, string> = { ...(opts.headers ?? {}) };
    if (this.bearer) headers.authorization = `Bearer ${this.bearer}`;
    if (this.workspace && headers['x-service-workspace'] === undefined) headers['x-service-workspace'] = this.workspace;
    if (this.cookies.size > 0) headers.cookie = [...this.cookies].map(([k, v]) => `${k}=${v}`).join('; ');
    if (opts.csrf !== false && this.csrf && method !== 'GET' && headers['x-csrf-token'] === undefined) headers['x-csrf-token'] = this.csrf;
    let body: string | Buffer | undefined = opts.body;
    if (opts.json !== undefined) {
      body = JSON.stringify(opts.json);
      headers['content-type'] ??= 'application/json';
    }
    const res = await fetch(this.base + path, { method, headers, body: typeof body === 'string' || body === undefined ? body : new Uint8Array(body) });
    for (const c of res.headers.getSetCookie()) {
      const [pair] = c.split(';');
      const [k, ...v] = pair!.split('=');
      const value = v.join('=');
      if (/expires=Thu, 01 Jan 1970/i.test(c) || value === '') this.cookies.delete(k!.trim());
      else this.cookies.set(k!.trim(), value);
    }
    const text = await res.text();
    let parsed: unknown = text;
    if ((res.headers.get('content-type') ?? '').includes('json') && text) parsed = JSON.parse(text);
    return { status: res.status, headers: res.headers, body: parsed as T, text };
  }

  get<T = any>(path: string, headers?: Record<string, string>) {
    return this.request<T>('GET', path, { headers });
  }
  post<T = any>(path: string, json?: unknown, headers?: Record<string, string>) {
    return this.request<T>('POST', path, { json, headers });
  }
  put<T = any>(path: string, json?: unknown, headers?: Record<string, string>) {
    return this.request<T>('PUT', path, { json, headers });
  }
  patch<T = any>(path: string, json?: unknown, headers?: Record<string, string>) {
    return this.request<T>('PATCH', path, { json, headers });
  }
  delete<T = any>(path: string, headers?: Record<string, string>) {
    return this.request<T>('DELETE', path, { headers });
  }
}

/** The same session (cookies) or key, sent to another node of the deployment. */
export function onNode(url: string, c: Client): Client {
  const copy = new Client(url, c.bearer);
  for (const [k, v] of c.cookies) copy.cookies.set(k, v);
  copy.workspace = c.workspace;
  return copy;
}

let counter = 0;

/** Signs up a fresh human; the client holds the session and CSRF cookies. */
export async function signupHuman(base: string, name = 'Ann'): Promise<{ client: Client; id: string; workspace: { id: string; slug: string } }> {
  const client = new Client(base);
  const email = `${name.toLowerCase()}-${process.pid}-${++counter}-${Date.now()}@example.com`;
  const res = await client.post('/api/v1/auth/signup', { email, password: 'correct horse battery', name });
  if (res.status !== 201) throw new Error(`signup failed: ${res.status} ${res.text}`);
  return { client, id: res.body.principal.id, workspace: res.body.workspace };
}

export interface GrantInput {
  action: string;
  scope?: string;
  ceiling?: string;
}

/** Creates an agent with the given grants and mints a key for it. */
export async function createAgentWithKey(
  human: Client,
  grants: GrantInput[],
  opts: { ceiling?: string; key?: Record<string, unknown>; name?: string } = {},
): Promise<{ id: string; key: string; keyId: string; client: Client }> {
  const a = await human.post('/api/v1/principals', {
    name: opts.name ?? 'agent',
    ceiling: opts.ceiling ?? 'confidential',
    grants: grants.map((g) => ({ action: g.action, scope: g.scope ?? '*', ceiling: g.ceiling ?? 'confidential' })),
  });
  if (a.status !== 201) throw new Error(`agent create failed: ${a.status} ${a.text}`);
  const k = await human.post(`/api/v1/principals/${a.body.id}/tokens`, { name: 'k', ...(opts.key ?? {}) });
  if (k.status !== 201) throw new Error(`key mint failed: ${k.status} ${k.text}`);
  return { id: a.body.id, key: k.body.key, keyId: k.body.id, client: new Client(human.base, k.body.key) };
}

/** An agent that reads and searches up to `ceiling` (inside `scope` when given): the usual reader of the attack suites. */
export function createReaderAgent(human: Client, ceiling: string, scope?: string): ReturnType<typeof createAgentWithKey> {
  return createAgentWithKey(
    human,
    ['read', 'search'].map((action) => ({ action, ceiling, ...(scope ? { scope } : {}) })),
    { ceiling },
  );
}

export const ALL = ['read', 'write', 'search', 'propose', 'collab', 'admin'];

/**
 * A new human joins the owner's workspace with a role through an invite; the returned
 * client works in that workspace.
 */
export async function joinAs(
  owner: Client,
  workspaceSlug: string,
  role: 'owner' | 'editor' | 'viewer',
  name: string = role,
): Promise<{ client: Client; id: string }> {
  const inv = await owner.post(`/api/v1/workspaces/${workspaceSlug}/invites`, { role });
  if (inv.status !== 201) throw new Error(`invite failed: ${inv.status} ${inv.text}`);
  const h = await signupHuman(owner.base, name);
  const acc = await h.client.post(`/api/v1/invites/${inv.body.token}/accept`);
  if (acc.status !== 200) throw new Error(`accept failed: ${acc.status} ${acc.text}`);
  h.client.workspace = workspaceSlug;
  return { client: h.client, id: h.id };
}
