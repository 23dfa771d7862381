/** Deterministic page contents and randomness for the benchmarks. */

/** mulberry32: a small seeded PRNG, so runs pick the same pages (the tests' own). */
import { prng as rng } from '../test/support/random.js';

export { rng };

const WORDS = (
  'deploy service cluster runbook incident review owner team latency budget schema migration rollout ' +
  'canary metric alert dashboard queue worker retry backoff cache index shard replica failover token ' +
  'secret rotation audit policy review decision context agent page folder space history commit'
).split(' ');

function sentence(r: () => number, words: number): string {
  const out: string[] = [];
  for (let i = 0; i < words; i++) out.push(WORDS[Math.floor(r() * WORDS.length)]!);
  const s = out.join(' ');
  return `${s[0]!.toUpperCase()}${s.slice(1)}.`;
}

/** A ~1 KB page of the big folder; `rev` changes one line, as a small edit would. */
export function bigFolderPage(n: number, rev: number): string {
  const r = rng(n * 7919 + 1);
  const paras: string[] = [];
  for (let i = 0; i < 4; i++) paras.push(`${sentence(r, 14)} ${sentence(r, 12)}`);
  return (
    `---\ntitle: Note ${n}\ntags: [bench, big]\n---\n# Note ${n}\n\n` +
    `${paras[0]}\n\n## Details\n\n${paras[1]}\n\n- ${sentence(r, 6)}\n- ${sentence(r, 7)}\n- See [[note-${(n % 97) + 1}]]\n\n` +
    `${paras[2]}\n\n${paras[3]}\n\nRevision ${rev}.\n`
  );
}

/** A typical ~2 KB page with headings, a list, links and a table. */
export function typicalPage(): string {
  const r = rng(42);
  const para = () => `${sentence(r, 16)} ${sentence(r, 14)} ${sentence(r, 12)}`;
  return (
    `---\ntitle: Deploying the payments service\ntags: [ops, deploy, payments]\nowner: team-payments\n---\n` +
    `# Deploying the payments service\n\n${para()}\n\n## Before you start\n\n${para()}\n\n` +
    `- ${sentence(r, 8)}\n- ${sentence(r, 9)}\n- ${sentence(r, 7)}\n- Read [[incident-runbook]] and [the rollback guide](../ops/rollback.md).\n\n` +
    `## Steps\n\n1. ${sentence(r, 10)}\n2. ${sentence(r, 11)}\n3. ${sentence(r, 9)}\n4. ${sentence(r, 12)}\n\n` +
    `| Stage | Owner | Budget |\n|---|---|---|\n| canary | payments | 5 min |\n| rollout | payments | 30 min |\n\n` +
    `## After\n\n${para()}\n\n${para()}\n`
  );
}
