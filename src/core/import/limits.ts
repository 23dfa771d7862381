import { MAX_PAGE_BYTES } from '../pages/content.js';

/**
 * Limits of an import (spec §8: 5 per hour, at most 50 MB uploaded; the rest are ours, in
 * docs/api.md "Import"). A zip may unpack to far more than it weighs: the archive limits refuse
 * it whole before anything is inflated, from its central directory; inflating then stops at each
 * entry's declared size (yauzl checks the data against it).
 */
export const IMPORT_LIMITS = {
  /** The upload, in any of the three forms. */
  maxUploadBytes: 50 * 1024 * 1024,
  /** Entries of an archive (directories included) or files of a JSON import. */
  maxEntries: 20_000,
  /** What the archive's entries declare unpacked, all together. */
  maxUnpackedBytes: 256 * 1024 * 1024,
  /** Unpacked size over archive size, above which an archive larger than `ratioFloorBytes` unpacked is a bomb. */
  maxRatio: 100,
  ratioFloorBytes: 16 * 1024 * 1024,
  /** One page (the store's limit): a larger entry is skipped without being inflated. */
  maxFileBytes: MAX_PAGE_BYTES,
  /** Files per commit and per transaction: the job applies an import in batches of this many. */
  batchFiles: 500,
  /** Skipped and renamed files listed in a report; the rest are counted. */
  maxReported: 1000,
} as const;
