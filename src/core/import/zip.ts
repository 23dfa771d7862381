import { crc32 } from 'node:zlib';
import yauzl, { type Entry, type ZipFile } from 'yauzl';
import { badRequest, ServiceError } from '../errors.js';
import { StagingList, type StagedImport } from './entries.js';
import { IMPORT_LIMITS } from './limits.js';

/**
 * Reading an uploaded zip (yauzl, from memory: the upload is at most 50 MB). The central
 * directory is judged first: too many entries, too much declared unpacked data or a ratio no
 * archive of text reaches refuses the archive whole (a bomb), before one byte is inflated. Each
 * entry is then judged by name, type and declared size, and only entries that may become pages
 * are inflated, each stopped at its declared size (yauzl's `validateEntrySizes`).
 */

const refused = (message: string) => new ServiceError(400, 'archive_refused', message);
const unreadable = (why: string) => badRequest(`The upload is not a zip archive that can be read: ${why}`, 'invalid_archive');

const S_IFMT = 0o170000;
const S_IFLNK = 0o120000;
const S_IFREG = 0o100000;
/** Made on Unix: the high half of the external attributes is a file mode. */
const UNIX = 3;
const UTF8_FLAG = 0x800;
const fatalUtf8 = new TextDecoder('utf-8', { fatal: true });

function entryName(e: Entry): string {
  const raw = e.fileName as unknown as Buffer;
  if ((e.generalPurposeBitFlag & UTF8_FLAG) === 0) {
    // Unflagged names are CP437 by the format, but many tools write UTF-8 without the flag.
    try {
      return fatalUtf8.decode(raw);
    } catch {
      return yauzl.getFileNameLowLevel(e.generalPurposeBitFlag, raw, e.extraFields, false);
    }
  }
  try {
    return fatalUtf8.decode(raw);
  } catch {
    return `${raw.toString('latin1')} (name not UTF-8)`;
  }
}

/** Why an entry is not a plain file, or null. */
function typeProblem(e: Entry): string | null {
  if (e.isEncrypted()) return 'encrypted';
  const madeBy = e.versionMadeBy >> 8;
  const mode = (e.externalFileAttributes >>> 16) & S_IFMT;
  if (madeBy === UNIX && mode === S_IFLNK) return 'a symbolic link';
  if (madeBy === UNIX && mode !== 0 && mode !== S_IFREG) return 'not a regular file';
  if (e.compressionMethod !== 0 && e.compressionMethod !== 8) return `compressed with method ${e.compressionMethod}, which is not supported (use deflate)`;
  return null;
}

function open(buffer: Buffer): Promise<ZipFile> {
  return new Promise((resolve, reject) => {
    yauzl.fromBuffer(buffer, { lazyEntries: true, decodeStrings: false, validateEntrySizes: true }, (err, zip) => {
      if (err || !zip) reject(unreadable(err?.message ?? 'no archive'));
      else resolve(zip);
    });
  });
}

/** Every entry of the central directory (names and sizes only; nothing is inflated). */
function listEntries(zip: ZipFile): Promise<Entry[]> {
  return new Promise((resolve, reject) => {
    const out: Entry[] = [];
    zip.on('entry', (e: Entry) => {
      out.push(e);
      if (out.length > IMPORT_LIMITS.maxEntries) {
        zip.close();
        reject(refused(`The archive has more than ${IMPORT_LIMITS.maxEntries} entries`));
        return;
      }
      zip.readEntry();
    });
    zip.on('end', () => resolve(out));
    zip.on('error', (err: Error) => reject(unreadable(err.message)));
    zip.readEntry();
  });
}

function inflate(zip: ZipFile, e: Entry): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    zip.openReadStream(e, (err, stream) => {
      if (err || !stream) {
        reject(unreadable(`${entryName(e)}: ${err?.message ?? 'no data'}`));
        return;
      }
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('error', (er: Error) => reject(unreadable(`${entryName(e)}: ${er.message}`)));
      stream.on('end', () => {
        const data = Buffer.concat(chunks);
        // yauzl checks sizes, not checksums: data that is not what the archive says it is
        // (a damaged or doctored archive) is refused like a lying size.
        if (crc32(data) !== e.crc32 >>> 0) reject(unreadable(`${entryName(e)}: its data does not match its CRC-32`));
        else resolve(data);
      });
    });
  });
}

/** The files of a zip upload under `space`, and what was left out and why. */
export async function readZip(buffer: Buffer, space: string): Promise<StagedImport> {
  const zip = await open(buffer);
  if (zip.entryCount > IMPORT_LIMITS.maxEntries) refusedThrow(`The archive has ${zip.entryCount} entries; at most ${IMPORT_LIMITS.maxEntries} are taken`);
  const entries = await listEntries(zip);
  const unpacked = entries.reduce((n, e) => n + e.uncompressedSize, 0);
  if (unpacked > IMPORT_LIMITS.maxUnpackedBytes) refusedThrow(`The archive unpacks to ${unpacked} bytes; at most ${IMPORT_LIMITS.maxUnpackedBytes} are taken`);
  if (unpacked > IMPORT_LIMITS.ratioFloorBytes && unpacked > buffer.length * IMPORT_LIMITS.maxRatio)
    refusedThrow(`The archive unpacks to ${Math.round(unpacked / buffer.length)} times its size; more than ${IMPORT_LIMITS.maxRatio} is taken for a zip bomb`);

  const list = new StagingList(space);
  for (const e of entries) {
    const name = entryName(e);
    const path = list.admit(name);
    if (path === null) continue;
    const problem = typeProblem(e);
    if (problem) list.skip(name, problem);
    else if (e.uncompressedSize > IMPORT_LIMITS.maxFileBytes) list.skip(name, `larger than ${IMPORT_LIMITS.maxFileBytes} bytes`);
    else list.add(name, path, await inflate(zip, e));
  }
  return list;
}

function refusedThrow(message: string): never {
  throw refused(message);
}
