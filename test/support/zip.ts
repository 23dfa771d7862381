import { crc32, deflateRawSync } from 'node:zlib';

/**
 * A small zip writer for tests, hand-written on purpose: import tests need archives no honest
 * tool makes (names with `../` or a drive letter, symlink entries, sizes that lie, a million
 * entries of nothing), so every field is in the test's hands. Format: PKWARE APPNOTE 4.3/4.4
 * (local headers, central directory, end record; no zip64).
 */
export interface ZipEntry {
  name: string | Buffer;
  data?: Buffer | string;
  /** deflate (default) or store. */
  method?: 'deflate' | 'store';
  /** A Unix mode for the external attributes (e.g. 0o120777 for a symlink); made-by is Unix when set. */
  mode?: number;
  /** Overrides the uncompressed size written in the headers (a lying archive). */
  declaredSize?: number;
  /** Sets general-purpose bit 11 (names are UTF-8); default: set when the name is a string. */
  utf8?: boolean;
  /** More general-purpose bits, OR-ed in (bit 0, `1`: the entry claims to be encrypted). */
  flags?: number;
  /** Writes this compression method number in the headers instead (the data stays as `method` made it). */
  methodId?: number;
}

/** General-purpose bit 0: the entry is encrypted (traditional PKWARE encryption). */
export const ENCRYPTED = 0x1;

export function buildZip(entries: ZipEntry[]): Buffer {
  const locals: Buffer[] = [];
  const centrals: Buffer[] = [];
  let offset = 0;
  for (const e of entries) {
    const name = typeof e.name === 'string' ? Buffer.from(e.name, 'utf8') : e.name;
    const data = typeof e.data === 'string' ? Buffer.from(e.data, 'utf8') : (e.data ?? Buffer.alloc(0));
    const deflate = e.method !== 'store';
    const body = deflate ? deflateRawSync(data) : data;
    const method = e.methodId ?? (deflate ? 8 : 0);
    const crc = crc32(data) >>> 0;
    const size = e.declaredSize ?? data.length;
    const flags = ((e.utf8 ?? typeof e.name === 'string') ? 0x800 : 0) | (e.flags ?? 0);
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt16LE(flags, 6);
    local.writeUInt16LE(method, 8);
    local.writeUInt32LE(0, 10);
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(body.length, 18);
    local.writeUInt32LE(size, 22);
    local.writeUInt16LE(name.length, 26);
    local.writeUInt16LE(0, 28);
    const central = Buffer.alloc(46);
    central.writeUInt32LE(0x02014b50, 0);
    central.writeUInt16LE(e.mode !== undefined ? (3 << 8) | 20 : 20, 4);
    central.writeUInt16LE(20, 6);
    central.writeUInt16LE(flags, 8);
    central.writeUInt16LE(method, 10);
    central.writeUInt32LE(0, 12);
    central.writeUInt32LE(crc, 16);
    central.writeUInt32LE(body.length, 20);
    central.writeUInt32LE(size, 24);
    central.writeUInt16LE(name.length, 28);
    central.writeUInt16LE(0, 30);
    central.writeUInt16LE(0, 32);
    central.writeUInt16LE(0, 34);
    central.writeUInt16LE(0, 36);
    central.writeUInt32LE(e.mode !== undefined ? (e.mode << 16) >>> 0 : 0, 38);
    central.writeUInt32LE(offset, 42);
    locals.push(local, name, body);
    centrals.push(central, name);
    offset += local.length + name.length + body.length;
  }
  const cd = Buffer.concat(centrals);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length & 0xffff, 8);
  end.writeUInt16LE(entries.length & 0xffff, 10);
  end.writeUInt32LE(cd.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, cd, end]);
}

/** A multipart/form-data body with text fields and one file field. */
export function multipart(fields: Record<string, string>, file?: { field: string; name: string; data: Buffer; type?: string }) {
  const boundary = `----cv${Math.random().toString(36).slice(2)}`;
  const parts: Buffer[] = [];
  for (const [k, v] of Object.entries(fields)) parts.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${k}"\r\n\r\n${v}\r\n`));
  if (file) {
    parts.push(
      Buffer.from(
        `--${boundary}\r\nContent-Disposition: form-data; name="${file.field}"; filename="${file.name}"\r\nContent-Type: ${file.type ?? 'application/zip'}\r\n\r\n`,
      ),
      file.data,
      Buffer.from('\r\n'),
    );
  }
  parts.push(Buffer.from(`--${boundary}--\r\n`));
  return { body: Buffer.concat(parts), contentType: `multipart/form-data; boundary=${boundary}` };
}
