/**
 * GET /api/v1/nodes/:id requests per second with keep-alive clients, against the real service in
 * a child process, next to a bare Fastify route (bench/bare-server.ts, also a child process)
 * answering a JSON object of the same size. The load generator runs in this process.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Client, createAgentWithKey, signupHuman } from '../test/support/server.js';
import { typicalPage } from './content.js';
import { cpuProfileEnv, load, log, makeTempDir, removeTempDir, round, SERVICE_ENV, startChild, type ChildServer } from './util.js';

export async function benchReads(opts: { durationS: number; warmupS: number; connections: number }): Promise<Record<string, unknown>> {
  const dataDir = makeTempDir('reads');
  let service: ChildServer | undefined;
  let bare: ChildServer | undefined;
  try {
    log('reads: starting the service (src/main.ts) as a child process');
    service = await startChild({
      name: 'service',
      script: 'src/main.ts',
      env: { ...SERVICE_ENV, DATA_DIR: dataDir, ...cpuProfileEnv() },
      readyPath: '/healthz',
    });
    const human = await signupHuman(service.url, 'Reader');
    const agent = await createAgentWithKey(human.client, [{ action: 'read' }, { action: 'write' }], { name: 'bench-reader' });
    const content = typicalPage();
    const created = await agent.client.post('/api/v1/nodes', { path: 'eng/ops/deploy-payments.md', content });
    if (created.status !== 201) throw new Error(`page create failed: ${created.status} ${created.text}`);
    const id = created.body.id as string;
    const check = await new Client(service.url, agent.key).get(`/api/v1/nodes/${id}`);
    if (check.status !== 200) throw new Error(`page read failed: ${check.status} ${check.text}`);
    const bodyBytes = Buffer.byteLength(check.text);

    const headers = { authorization: `Bearer ${agent.key}` };
    const path_ = `/api/v1/nodes/${id}`;
    log(`reads: service GET ${path_} (${Buffer.byteLength(content)} B markdown, ${bodyBytes} B JSON), ${opts.connections} connections`);
    await load({ url: service.url, connections: opts.connections, durationS: opts.warmupS, headers, path: path_ });
    const svc = await load({ url: service.url, connections: opts.connections, durationS: opts.durationS, headers, path: path_ });
    log(`  service: ${svc.requests_per_sec} req/s (p50 ${svc.latency_p50_ms} ms, p99 ${svc.latency_p99_ms} ms)`);
    await service.stop();
    service = undefined;

    // The bare server answers the very record the service returned (same JSON size).
    const payloadFile = path.join(dataDir, 'bare-payload.json');
    fs.writeFileSync(payloadFile, check.text);
    log('reads: starting bench/bare-server.ts as a child process');
    bare = await startChild({
      name: 'bare',
      script: 'bench/bare-server.ts',
      env: { LOG_LEVEL: 'warn', BARE_PAYLOAD_FILE: payloadFile },
      readyPath: path_,
    });
    const bareCheck = await fetch(bare.url + path_);
    const bareBytes = Buffer.byteLength(await bareCheck.text());
    await load({ url: bare.url, connections: opts.connections, durationS: opts.warmupS, headers, path: path_ });
    const b = await load({ url: bare.url, connections: opts.connections, durationS: opts.durationS, headers, path: path_ });
    log(`  bare: ${b.requests_per_sec} req/s (p50 ${b.latency_p50_ms} ms, p99 ${b.latency_p99_ms} ms)`);
    await bare.stop();
    bare = undefined;

    return {
      service_env: SERVICE_ENV,
      connections: opts.connections,
      duration_s: opts.durationS,
      warmup_s_each: opts.warmupS,
      page_markdown_bytes: Buffer.byteLength(content),
      service_json_body_bytes: bodyBytes,
      bare_json_body_bytes: bareBytes,
      service: svc,
      bare_fastify: b,
      ratio_service_over_bare_requests_per_sec: round(svc.requests_per_sec / b.requests_per_sec, 3),
      ratio_service_over_bare_latency_p50: round(svc.latency_p50_ms / b.latency_p50_ms, 2),
      ratio_service_over_bare_latency_p99: round(svc.latency_p99_ms / b.latency_p99_ms, 2),
    };
  } finally {
    if (service) await service.stop();
    if (bare) await bare.stop();
    removeTempDir(dataDir);
  }
}
