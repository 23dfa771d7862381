import { spawn } from 'node:child_process';
import path from 'node:path';
import { ROOT } from '../support/service-process.js';

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `context-vault <args>` as its own process through the package's bin entry, stdin and
 * stdout as pipes (as in a script), against the deployment the env names.
 */
export function cli(args: string[], opts: { env?: Record<string, string | undefined>; input?: string; timeoutMs?: number } = {}): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const env: Record<string, string | undefined> = { ...process.env, LOG_LEVEL: 'warn', DATABASE_URL: undefined, ...opts.env };
    for (const k of Object.keys(env)) if (env[k] === undefined) delete env[k];
    const child = spawn(process.execPath, [path.join(ROOT, 'bin/context-vault.mjs'), ...args], { cwd: ROOT, env: env as NodeJS.ProcessEnv });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`context-vault ${args.join(' ')} did not end in time; stderr: ${stderr}`));
    }, opts.timeoutMs ?? 60_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.stdin.end(opts.input ?? '');
  });
}

/** One failure line, no stack trace: what a person at a terminal should see. */
export function oneCleanLine(stderr: string): boolean {
  const lines = stderr.trim().split('\n');
  return lines.length === 1 && !/\n\s+at /.test(stderr) && !stderr.includes('Error:');
}

/** Terminal control characters a progress bar would leave in a pipe. */
export const CONTROL = /[\r\u001b]/;
