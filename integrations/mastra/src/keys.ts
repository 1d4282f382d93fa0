/**
 * Keys and owners as stored bytes, so that no string Mastra can produce is refused.
 *
 * - **WTF-8**: a string is stored as its UTF-8 bytes; a lone surrogate (which a JavaScript
 *   string may hold, and Mastra's run ids may carry) becomes its 3-byte generalized UTF-8
 *   form, exactly what Python's `str.encode("utf-8", "surrogatepass")` gives. Valid text is
 *   unchanged, and two different strings never meet.
 * - **Long keys**: a key over `MAX_NAME_BYTES` (1024) bytes is stored under
 *   `mapLongKey(key)`: its first bytes (cut at a character), then `LONG_KEY_MARKER`, then
 *   the 64 hex digits of the SHA-256 of all its bytes, 1024 bytes at most. The Python
 *   library's `sql_lease.map_long_key` gives the same string, so a Python process can address
 *   the same lease. A key of 1024 bytes or fewer is its own stored form.
 */

import { createHash } from 'node:crypto';

import { LeaseDatabaseError } from './errors.js';
import { catalogue } from './catalogue.js';

const MAX_BYTES: number = catalogue.limits.max_name_bytes;
/** Between the kept head of a long key and its SHA-256 (NUL: never in ordinary text). */
export const LONG_KEY_MARKER = '\u0000sql-lease-sha256:';
/** How many bytes of a long key's head the mapped form keeps, at most. */
export const LONG_KEY_HEAD_BYTES = MAX_BYTES - Buffer.byteLength(LONG_KEY_MARKER) - 64;

/** The WTF-8 bytes of `text` (its UTF-8 bytes when it has no lone surrogate). */
export function wtf8(text: string): Buffer {
  if (text.isWellFormed()) return Buffer.from(text, 'utf8');
  const out: number[] = [];
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    const next = text.charCodeAt(i + 1);
    if (unit >= 0xd800 && unit <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
      const point = 0x10000 + ((unit - 0xd800) << 10) + (next - 0xdc00);
      out.push(0xf0 | (point >> 18), 0x80 | ((point >> 12) & 0x3f), 0x80 | ((point >> 6) & 0x3f), 0x80 | (point & 0x3f));
      i++;
    } else if (unit < 0x80) {
      out.push(unit);
    } else if (unit < 0x800) {
      out.push(0xc0 | (unit >> 6), 0x80 | (unit & 0x3f));
    } else {
      // the rest of the BMP, lone surrogates included (what "surrogatepass" writes)
      out.push(0xe0 | (unit >> 12), 0x80 | ((unit >> 6) & 0x3f), 0x80 | (unit & 0x3f));
    }
  }
  return Buffer.from(out);
}

const STRICT = new TextDecoder('utf-8', { fatal: true });

/** The string of WTF-8 `bytes`, or undefined when they are not WTF-8 (nor UTF-8). */
export function fromWtf8(bytes: Uint8Array): string | undefined {
  try {
    return STRICT.decode(bytes);
  } catch {
    // not UTF-8: maybe lone surrogates in their 3-byte form; decoded by hand below
  }
  let out = '';
  let i = 0;
  let afterHigh = false; // the last character was a lone high surrogate
  while (i < bytes.length) {
    const b = bytes[i] as number;
    const need = b < 0x80 ? 0 : b >= 0xc2 && b <= 0xdf ? 1 : b >= 0xe0 && b <= 0xef ? 2 : b >= 0xf0 && b <= 0xf4 ? 3 : -1;
    if (need < 0 || i + need >= bytes.length) return undefined;
    let point = need === 0 ? b : b & (0x3f >> need);
    for (let j = 1; j <= need; j++) {
      const c = bytes[i + j] as number;
      if ((c & 0xc0) !== 0x80) return undefined;
      point = (point << 6) | (c & 0x3f);
    }
    if (point < ([0, 0x80, 0x800, 0x10000][need] as number) || point > 0x10ffff) return undefined; // overlong
    // A pair written as two 3-byte halves is not WTF-8: it would meet the pair's 4-byte form.
    if (afterHigh && point >= 0xdc00 && point <= 0xdfff) return undefined;
    afterHigh = point >= 0xd800 && point <= 0xdbff;
    out += String.fromCodePoint(point); // a lone surrogate stays one (a string may hold it)
    i += need + 1;
  }
  return out;
}

/** The string of stored `bytes`, or a `LeaseDatabaseError` naming the key in hex. */
export function decodeName(bytes: Buffer, what: string, key: Uint8Array, operation: string): string {
  const text = fromWtf8(bytes);
  if (text !== undefined) return text;
  throw new LeaseDatabaseError(
    `${operation}: the ${what} of the lease with key (hex) ${Buffer.from(key).toString('hex')} is not UTF-8 ` +
      `(nor WTF-8) text: ${bytes.toString('hex')} (hex); was the row written by another tool?`,
    { operation },
  );
}

/** Cut `bytes` to at most `n`, at a character boundary. */
function head(bytes: Buffer, n: number): Buffer {
  let end = Math.min(n, bytes.length);
  while (end > 0 && end < bytes.length && ((bytes[end] as number) & 0xc0) === 0x80) end--;
  return bytes.subarray(0, end);
}

/**
 * The key under which `key` is stored: `key` itself up to 1024 WTF-8 bytes, else its head,
 * `LONG_KEY_MARKER` and the SHA-256 of its WTF-8 bytes in hex (see the module comment).
 */
export function mapLongKey(key: string): string {
  const bytes = wtf8(key);
  return bytes.length <= MAX_BYTES ? key : (fromWtf8(mappedBytes(bytes)) as string);
}

/** The stored bytes of a key's WTF-8 `bytes` (mapped when over the limit). */
export function mappedBytes(bytes: Buffer): Buffer {
  if (bytes.length <= MAX_BYTES) return bytes;
  const digest = createHash('sha256').update(bytes).digest('hex');
  return Buffer.concat([head(bytes, LONG_KEY_HEAD_BYTES), Buffer.from(LONG_KEY_MARKER + digest, 'utf8')]);
}

/** Between the kept head of a mapped topic and its SHA-256 (topics are text: no NUL). */
export const TOPIC_MARKER = '#sql-lease-sha256:';

/**
 * The topic under which `topic` is stored (a `text` column of at most 1024 bytes): itself when
 * it is text PostgreSQL can store within the limit, else its head (NUL and lone surrogates
 * replaced), `TOPIC_MARKER` and the SHA-256 of its WTF-8 bytes, so no topic Mastra makes (a
 * thread topic of a 4,000-byte key, a run id with a lone surrogate) is refused or merged.
 */
export function storedTopic(topic: string): string {
  const bytes = wtf8(topic);
  if (bytes.length <= MAX_BYTES && topic.isWellFormed() && !topic.includes('\0')) return topic;
  const digest = createHash('sha256').update(bytes).digest('hex');
  const safe = Buffer.from(topic.toWellFormed().replaceAll('\0', '\ufffd'), 'utf8');
  return head(safe, MAX_BYTES - TOPIC_MARKER.length - 64).toString('utf8') + TOPIC_MARKER + digest;
}
