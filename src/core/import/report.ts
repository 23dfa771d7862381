import type { RenamedFile, SkippedFile } from './entries.js';
import { IMPORT_LIMITS } from './limits.js';

/** An import's report as stored (`import_jobs.report`) and shown. */
export interface ImportReport {
  created: number;
  updated: number;
  unchanged: number;
  /** Files left out and why: the first IMPORT_LIMITS.maxReported; `skipped_count` counts all. */
  skipped: SkippedFile[];
  skipped_count: number;
  /** Files imported under another name (spaces in names, `.markdown`). */
  renamed: RenamedFile[];
  renamed_count: number;
  /** The commits the import made, one per batch, in order. */
  commits: string[];
}

export function emptyReport(): ImportReport {
  return { created: 0, updated: 0, unchanged: 0, skipped: [], skipped_count: 0, renamed: [], renamed_count: 0, commits: [] };
}

export function parseReport(json: string): ImportReport {
  return { ...emptyReport(), ...(JSON.parse(json) as Partial<ImportReport>) };
}

/** Longest name or reason listed: a zip name may be 64 KB, and no page path is over 512 characters. */
const MAX_SHOWN = 600;

/** A name or reason as listed: cut when it is longer than any page path could be. */
function shown(text: string): string {
  return text.length <= MAX_SHOWN ? text : `${text.slice(0, MAX_SHOWN)}… (${text.length} characters)`;
}

/** Adds skipped or renamed files to a report, keeping the listed ones within the limit. */
export function noteFiles(report: ImportReport, skipped: readonly SkippedFile[], renamed: readonly RenamedFile[] = []): void {
  report.skipped.push(
    ...skipped.slice(0, Math.max(0, IMPORT_LIMITS.maxReported - report.skipped.length)).map((s) => ({ path: shown(s.path), reason: shown(s.reason) })),
  );
  report.skipped_count += skipped.length;
  report.renamed.push(
    ...renamed
      .slice(0, Math.max(0, IMPORT_LIMITS.maxReported - report.renamed.length))
      .map((r) => ({ path: shown(r.path), imported_as: shown(r.imported_as) })),
  );
  report.renamed_count += renamed.length;
}
