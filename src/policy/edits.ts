import { forbidden } from '../errors/index.js';
import { canReadInFull, type Decision, type PageFacts } from './pages.js';
import type { Principal } from './principal.js';

/**
 * An edit in place (append, replace a section, apply a diff: core/pages/edit-apply.ts) is
 * computed on the page's whole text, hidden blocks included. The caller may make one only on a
 * page it reads whole: otherwise the edit could move, cut or overwrite text it never saw, and
 * its errors (the headings a missing section lists) would describe that text. This stands
 * before the write's own decision (decideWrite), which then judges the result.
 */
export function decidePartialEdit(p: Principal, page: PageFacts): Decision {
  if (canReadInFull(p, page)) return { kind: 'allow' };
  return {
    kind: 'deny',
    error: forbidden(
      'The page holds blocks above your ceiling (shown to you as [redacted]); an append, section replace or patch cannot apply to text you cannot see',
    ),
  };
}
