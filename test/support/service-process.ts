import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';

/** The repository root: where `npm start` runs. */
export const ROOT = path.resolve(import.meta.dirname, '../..');

/** Resolves when the child has exited, even if it already had. */
export function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((r) => child.once('exit', () => r()));
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

/**
 * Starts `npm start`'s entry point as its own process, as an operator would, and waits until
 * /healthz answers. One process (`node --import tsx`), so a SIGKILL reaches the server itself:
 * the tsx CLI would run it as a child that outlives its killed parent.
 */
export async function spawnService(env: Record<string, string>): Promise<{ child: ChildProcess; url: string }> {
  const port = await freePort();
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    cwd: ROOT,
    env: { ...process.env, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'warn', RATE_LIMITS: 'off', ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  // The last of what it printed, so a start that fails says why.
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 300; i++) {
    if (child.exitCode !== null || child.signalCode !== null) break;
    try {
      if ((await fetch(`${url}/healthz`)).ok) return { child, url };
    } catch {
      /* not up yet */
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const how = child.exitCode !== null ? `exited ${child.exitCode}` : child.signalCode !== null ? `killed by ${child.signalCode}` : 'no answer in 30 s';
  child.kill('SIGKILL');
  throw new Error(`service did not start (${how}):\n${stderr}`);
}
