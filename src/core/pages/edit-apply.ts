import { applyPatch, parsePatch } from 'diff';
import { documentBody, extractSections, findSectionRange } from '../../markdown/index.js';
import { badRequest, conflict, notFound } from '../errors.js';

/**
 * Edits that do not resend the whole page (issue 13): append, replace a section, apply a unified
 * diff. Each is a pure function of the page's raw markdown, so the write path applies it to the
 * version the writer read (base_sha) and merges three-way exactly as a full write (update.ts).
 * The caller must read that text whole (policy/edits.ts): these functions see hidden blocks'
 * text, and their errors (the headings that exist) must never describe text the caller cannot see.
 */

export type EditMode =
  | { kind: 'append'; text: string; section?: string | undefined }
  | { kind: 'replace_section'; section: string; text: string }
  | { kind: 'patch'; patch: string };

/** Longest accepted patch text. */
export const MAX_PATCH_CHARS = 1024 * 1024;

/** Checks a unified diff of one file with at least one hunk; 400 invalid_patch otherwise. */
export function checkUnifiedPatch(patch: string): void {
  if (patch.length > MAX_PATCH_CHARS) throw badRequest(`A patch holds at most ${MAX_PATCH_CHARS} characters`, 'invalid_patch');
  let hunks: number;
  try {
    const files = parsePatch(patch);
    if (files.length > 1) throw new Error('it holds more than one file');
    hunks = files.reduce((n, f) => n + f.hunks.length, 0);
  } catch (e) {
    throw badRequest(`The patch is not a unified diff of one file: ${e instanceof Error ? e.message : String(e)}`, 'invalid_patch');
  }
  if (hunks === 0) throw badRequest('The patch is not a unified diff: it holds no hunk (lines starting with @@)', 'invalid_patch');
}

/** Applies a checked unified diff; false when a hunk does not match the text. */
export function applyUnifiedPatch(content: string, patch: string): string | false {
  try {
    return applyPatch(content, patch);
  } catch (e) {
    throw badRequest(`The patch is not a unified diff of one file: ${e instanceof Error ? e.message : String(e)}`, 'invalid_patch');
  }
}

/** The text ending in exactly one newline. */
function asBlock(text: string): string {
  return text.replace(/(\r?\n)+$/, '') + '\n';
}

/** The blank-line separator markdown needs before a new block after `before`. */
function gap(before: string): string {
  if (before === '' || before.endsWith('\n\n')) return '';
  return before.endsWith('\n') ? '\n' : '\n\n';
}

/** Headings named in a `section_not_found` answer at most (as context_get's). */
const HEADINGS_SHOWN = 30;

function missingSection(body: string, section: string, where: string): never {
  const headings = extractSections(body)
    .map((s) => s.heading)
    .filter((h) => h !== '');
  const shown = headings.slice(0, HEADINGS_SHOWN).map((h) => `"${h}"`);
  if (headings.length > HEADINGS_SHOWN) shown.push('…');
  const list = headings.length > 0 ? `; its headings: ${shown.join(', ')}` : '; it has no headings';
  throw notFound(`No section titled "${section}" in ${where}${list}`, 'section_not_found');
}

/** The raw markdown after the edit; `where` names the page (and version) in error texts. */
export function applyEdit(raw: string, mode: EditMode, where: string): string {
  if (mode.kind === 'patch') {
    const patched = applyUnifiedPatch(raw, mode.patch);
    if (patched === false) {
      throw conflict(`The patch does not apply to ${where}; read the page again (context_get) and make the diff against its content`, 'patch_does_not_apply');
    }
    return patched;
  }
  const body = documentBody(raw);
  const head = raw.slice(0, raw.length - body.length);
  if (mode.kind === 'append' && mode.section === undefined) return raw + gap(raw) + asBlock(mode.text);
  const section = mode.section!;
  const r = findSectionRange(body, section);
  if (!r) missingSection(body, section, where);
  const after = body.slice(r.end);
  if (mode.kind === 'append') {
    const before = body.slice(0, r.end).replace(/(\r?\n)+$/, '\n');
    return head + before + gap(before) + asBlock(mode.text) + (after === '' ? '' : '\n') + after;
  }
  // The new text replaces everything under the heading (sub-sections too, as context_get's
  // `section` shows it); a copy of the heading line at its start is taken as the heading itself.
  const headingLines = body.slice(r.start, r.textStart).trimEnd();
  let text = mode.text;
  const lead = text.replace(/^\s*\n/, '');
  if (lead === headingLines || lead.startsWith(`${headingLines}\n`) || lead.startsWith(`${headingLines}\r\n`)) text = lead.slice(headingLines.length);
  const inner = text.replace(/^(\r?\n)+/, '').replace(/(\r?\n)+$/, '');
  const middle = inner === '' ? '' : `\n${inner}\n`;
  return head + body.slice(0, r.textStart) + middle + (after === '' ? '' : '\n') + after;
}
