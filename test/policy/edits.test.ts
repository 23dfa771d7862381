import { describe, expect, it } from 'vitest';
import { decidePartialEdit } from '../../src/policy/edits.js';
import type { PageFacts } from '../../src/policy/pages.js';
import type { Principal } from '../../src/policy/principal.js';
import { decideWithdraw, type ProposalFacts } from '../../src/policy/proposals.js';
import { agent, ALLOW, forbid, g, human, outcome, type Outcome } from './support.js';

/**
 * Table-driven tests of the issue 13 decisions: an edit in place only on a page the caller reads
 * whole (src/policy/edits.ts), and withdrawing only one's own open proposal (src/policy/proposals.ts).
 */

const page = (path: string, sensitivity: string, blockLevel: string | null = null): PageFacts => ({ path, sensitivity, blockLevel });
const HIDDEN = forbid(
  'The page holds blocks above your ceiling (shown to you as [redacted]); an append, section replace or patch cannot apply to text you cannot see',
);

describe('decidePartialEdit: the whole text must be readable', () => {
  const writer = agent([g('read', 'eng', 'confidential'), g('write', 'eng', 'confidential')]);
  const rows: { name: string; actor: Principal; input: PageFacts; expected: Outcome }[] = [
    { name: 'agent, internal page, no blocks', actor: writer, input: page('eng/a.md', 'internal'), expected: ALLOW },
    { name: 'agent, block at its ceiling', actor: writer, input: page('eng/a.md', 'internal', 'confidential'), expected: ALLOW },
    { name: 'agent, secret block above its ceiling', actor: writer, input: page('eng/a.md', 'internal', 'secret'), expected: HIDDEN },
    { name: 'agent, page outside its read grant', actor: writer, input: page('ops/a.md', 'internal'), expected: HIDDEN },
    { name: 'agent, unknown block level (fail closed)', actor: writer, input: page('eng/a.md', 'internal', 'weird'), expected: HIDDEN },
    { name: 'editor, confidential block', actor: human('editor'), input: page('eng/a.md', 'internal', 'confidential'), expected: ALLOW },
    { name: 'editor, secret block', actor: human('editor'), input: page('eng/a.md', 'internal', 'secret'), expected: HIDDEN },
    { name: 'owner, secret block', actor: human('owner'), input: page('eng/a.md', 'secret', 'secret'), expected: ALLOW },
    { name: 'viewer, internal page', actor: human('viewer'), input: page('eng/a.md', 'internal'), expected: ALLOW },
  ];
  for (const r of rows) it(r.name, () => expect(outcome(decidePartialEdit(r.actor, r.input))).toEqual(r.expected));
});

describe('decideWithdraw: the author, while open', () => {
  const me = agent([g('propose', '*', 'confidential')]);
  const pr = (proposerId: string, status: string): ProposalFacts & { status: string } => ({
    path: 'eng/a.md',
    sensitivity: 'internal',
    origin: 'propose',
    proposerId,
    status,
  });
  const NOT_MINE = forbid('Only the author of a proposal may withdraw it');
  const closed = (s: string): Outcome => ({
    kind: 'deny',
    status: 409,
    code: 'proposal_closed',
    message: `The proposal is ${s}; only an open one can be withdrawn`,
  });
  const rows: { name: string; actor: Principal; input: ProposalFacts & { status: string }; expected: Outcome }[] = [
    { name: 'own open proposal', actor: me, input: pr(me.id, 'open'), expected: ALLOW },
    { name: 'own accepted proposal', actor: me, input: pr(me.id, 'accepted'), expected: closed('accepted') },
    { name: 'own rejected (or withdrawn) proposal', actor: me, input: pr(me.id, 'rejected'), expected: closed('rejected') },
    { name: 'own superseded proposal', actor: me, input: pr(me.id, 'superseded'), expected: closed('superseded') },
    { name: "another agent's open proposal", actor: me, input: pr('pr_other', 'open'), expected: NOT_MINE },
    { name: "the owner, someone else's open proposal (reviewers reject instead)", actor: human('owner'), input: pr(me.id, 'open'), expected: NOT_MINE },
    { name: "someone else's closed proposal: not yours first", actor: me, input: pr('pr_other', 'accepted'), expected: NOT_MINE },
    { name: 'a human, own open proposal', actor: human('editor'), input: pr('pr_editor', 'open'), expected: ALLOW },
  ];
  for (const r of rows) it(r.name, () => expect(outcome(decideWithdraw(r.actor, r.input))).toEqual(r.expected));
});
