/**
 * MCP tools/call of context_get per second with keep-alive clients, next to GET
 * /api/v1/nodes/:id in the same run, against the real service in a child process (the same
 * page, the same agent key). Also the size of the tools/list answer in o200k tokens.
 *
 * Standalone: `npx tsx bench/mcp.ts [--quick]` prints one JSON object; `npm run bench` runs it
 * as `mcp` through bench/run.ts.
 */
import { encode } from 'gpt-tokenizer/encoding/o200k_base';
import { createAgentWithKey, signupHuman } from '../test/support/server.js';
import { typicalPage } from './content.js';
import {
  cpuProfileEnv,
  installCleanupHandlers,
  load,
  log,
  makeTempDir,
  removeTempDir,
  round,
  SERVICE_ENV,
  startChild,
  type ChildServer,
  runStandalone,
} from './util.js';

const ACCEPT = 'application/json, text/event-stream';

async function rpc(url: string, key: string, body: unknown): Promise<any> {
  const res = await fetch(`${url}/mcp`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', accept: ACCEPT },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`MCP ${res.status}: ${text.slice(0, 300)}`);
  return JSON.parse(text);
}

export async function benchMcp(opts: { durationS: number; warmupS: number; connections: number }): Promise<Record<string, unknown>> {
  const dataDir = makeTempDir('mcp');
  let service: ChildServer | undefined;
  try {
    log('mcp: starting the service (src/main.ts) as a child process');
    service = await startChild({
      name: 'service',
      script: 'src/main.ts',
      env: { ...SERVICE_ENV, DATA_DIR: dataDir, ...cpuProfileEnv() },
      readyPath: '/healthz',
    });
    const human = await signupHuman(service.url, 'Bencher');
    const agent = await createAgentWithKey(
      human.client,
      [{ action: 'read' }, { action: 'write' }, { action: 'search' }, { action: 'propose' }, { action: 'collab' }],
      {
        name: 'bench-mcp',
      },
    );
    const created = await agent.client.post('/api/v1/nodes', { path: 'eng/ops/deploy-payments.md', content: typicalPage() });
    if (created.status !== 201) throw new Error(`page create failed: ${created.status} ${created.text}`);
    const id = created.body.id as string;

    // tools/list: what every client loads into its model's context.
    const list = await rpc(service.url, agent.key, { jsonrpc: '2.0', id: 1, method: 'tools/list' });
    const listJson = JSON.stringify(list.result);
    const perTool = (list.result.tools as { name: string }[]).map((t) => ({ name: t.name, tokens: encode(JSON.stringify(t)).length }));

    const call = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'context_get', arguments: { id } } });
    const check = await rpc(service.url, agent.key, JSON.parse(call));
    if (check.result?.isError) throw new Error(`context_get failed: ${check.result.content[0].text}`);
    const mcpBytes = Buffer.byteLength(JSON.stringify(check));
    const restCheck = await agent.client.get(`/api/v1/nodes/${id}`);
    if (restCheck.status !== 200) throw new Error(`REST read failed: ${restCheck.status}`);

    const auth = { authorization: `Bearer ${agent.key}` };
    const mcpHeaders = { ...auth, 'content-type': 'application/json', accept: ACCEPT };
    const restPath = `/api/v1/nodes/${id}`;
    const run = async (what: 'rest' | 'mcp', durationS: number) =>
      what === 'rest'
        ? load({ url: service!.url, connections: opts.connections, durationS, headers: auth, path: restPath })
        : load({
            url: service!.url,
            connections: opts.connections,
            durationS,
            method: 'POST',
            headers: mcpHeaders,
            path: '/mcp',
            request: () => ({ path: '/mcp', body: call }),
            onOk: (body) => {
              if (body.includes('"isError":true')) throw new Error(`context_get failed under load: ${body.slice(0, 200)}`);
            },
          });

    log(`mcp: warm-up ${opts.warmupS} s each, then REST and MCP ${opts.durationS} s each, ${opts.connections} connections`);
    await run('rest', opts.warmupS);
    await run('mcp', opts.warmupS);
    const rest = await run('rest', opts.durationS);
    log(`  REST GET: ${rest.requests_per_sec} req/s (p50 ${rest.latency_p50_ms} ms, p99 ${rest.latency_p99_ms} ms)`);
    const mcp = await run('mcp', opts.durationS);
    log(`  MCP context_get: ${mcp.requests_per_sec} calls/s (p50 ${mcp.latency_p50_ms} ms, p99 ${mcp.latency_p99_ms} ms)`);

    return {
      service_env: SERVICE_ENV,
      connections: opts.connections,
      duration_s: opts.durationS,
      warmup_s_each: opts.warmupS,
      tools_list: {
        tools: perTool.length,
        json_bytes: Buffer.byteLength(listJson),
        tokens_o200k: encode(listJson).length,
        largest_tools: [...perTool].sort((a, b) => b.tokens - a.tokens).slice(0, 5),
      },
      rest_get_node: { ...rest, json_body_bytes: Buffer.byteLength(restCheck.text) },
      mcp_context_get: { ...mcp, json_body_bytes: mcpBytes },
      ratio_mcp_over_rest_requests_per_sec: round(mcp.requests_per_sec / rest.requests_per_sec, 3),
      target_ratio: 0.5,
    };
  } finally {
    if (service) await service.stop();
    removeTempDir(dataDir);
  }
}

// Standalone run.
if (process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href) {
  installCleanupHandlers();
  const quick = process.argv.includes('--quick');
  runStandalone(async () => ({ mcp: await benchMcp(quick ? { durationS: 3, warmupS: 1, connections: 8 } : { durationS: 10, warmupS: 2, connections: 8 }) }));
}
