/**
 * Counting leases, metadata and all-or-none acquires: the values and checks (no I/O), as the
 * Python library's `sql_lease._core.counting` and `_core.validate` have them, bounds from the
 * exported catalogue.
 *
 * A key acquired with `limit: N` may have up to N live owners at once, each with its own
 * fence, expiry and metadata. In the table such a key (or a lease with metadata) is one row
 * whose owner is the reserved byte `0xff` (never part of UTF-8, so no plain statement ever
 * matches it as an owner) and whose `holders` are a JSON array of the grants: `grantsOf` reads
 * them. A plain statement that meets such a row answers `0xff` as the holder: `isReserved`.
 */

import { catalogue } from './catalogue.js';
import { LeaseRangeError, LeaseTypeError } from './errors.js';
import { fromWtf8, wtf8 } from './keys.js';
import { checkKey } from './validate.js';

/** The largest `limit` (every grant is rewritten with the row: keep N small). */
export const MAX_LIMIT: number = catalogue.limits.max_limit;
/** The largest metadata, in bytes (a string counts as its UTF-8). */
export const MAX_METADATA_BYTES: number = catalogue.limits.max_metadata_bytes;
/** The most keys one `acquireLeases` or `releaseLeases` call takes. */
export const MAX_KEYS: number = catalogue.limits.max_keys;
/** The stored owner of a counting row. */
export const RESERVED_OWNER: Buffer = Buffer.from(catalogue.counting.reserved_owner, 'hex');

/** What `metadata` takes: a string (returned as a string) or bytes (returned as a Buffer). */
export type Metadata = string | Uint8Array;

/** `metadata` as stored: its bytes and whether it was a string; both null for none. */
export interface StoredMetadata {
  data: Buffer | null;
  isStr: boolean | null;
}

/** One holder of a key, as its row's `holders` has it. */
export interface Grant {
  owner: Buffer;
  fence: bigint;
  expiresAt: Date;
  acquiredAt: Date;
  /** Absent when the grant has none. */
  metadata?: Buffer | string;
}

function typeName(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? `a ${value.constructor?.name ?? 'object'}` : `a ${typeof value}`;
}

/** True when `owner` (a stored owner as read) is the reserved owner of a counting row. */
export function isReserved(owner: unknown): boolean {
  return Buffer.isBuffer(owner) && owner.equals(RESERVED_OWNER);
}

/** Validate a counting lease's `limit`: an integer from 1 to `MAX_LIMIT`. */
export function checkLimit(value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value)) {
    const shown = typeof value === 'number' ? String(value) : typeName(value);
    throw new LeaseTypeError(`limit must be an integer, not ${shown}`);
  }
  if (value < 1 || value > MAX_LIMIT) {
    throw new LeaseRangeError(`limit must be between 1 and ${MAX_LIMIT}, not ${value}`);
  }
  return value;
}

/**
 * Validate `metadata`: undefined or null (none), a string (stored as its WTF-8 bytes: see
 * keys.ts) or bytes (a Buffer or Uint8Array, copied), at most `MAX_METADATA_BYTES`.
 */
export function checkMetadata(value: unknown): StoredMetadata {
  if (value === undefined || value === null) return { data: null, isStr: null };
  let data: Buffer;
  let isStr: boolean;
  if (typeof value === 'string') {
    data = wtf8(value);
    isStr = true;
  } else if (value instanceof Uint8Array) {
    data = Buffer.from(value); // a copy: later changes to the caller's bytes change nothing
    isStr = false;
  } else {
    throw new LeaseTypeError(`metadata must be a string, a Buffer or a Uint8Array, not ${typeName(value)}`);
  }
  if (data.length > MAX_METADATA_BYTES) {
    throw new LeaseRangeError(`metadata is ${data.length} bytes; the limit is ${MAX_METADATA_BYTES}`);
  }
  return { data, isStr };
}

/** What an all-or-none call takes: the stored keys, sorted and distinct, each with the caller's key. */
export interface CheckedKeys {
  stored: Buffer[];
  /** Hex of a stored key -> the key as the caller wrote it. */
  given: Map<string, string>;
}

/**
 * Validate the keys of an all-or-none call: an array or other iterable (not a string) of 1
 * to `MAX_KEYS` keys; returns their stored forms, sorted bytewise and without duplicates (the
 * order rows are locked in, so two such calls never wait for each other in a cycle).
 */
export function checkKeys(keys: unknown): CheckedKeys {
  const iterable =
    typeof keys === 'object' && keys !== null && typeof (keys as Iterable<unknown>)[Symbol.iterator] === 'function';
  if (!iterable) {
    throw new LeaseTypeError(`keys must be an array (or another iterable) of strings, not ${typeName(keys)}`);
  }
  const given = new Map<string, string>();
  const stored: Buffer[] = [];
  for (const key of keys as Iterable<unknown>) {
    const k = checkKey(key);
    const hex = k.toString('hex');
    if (given.has(hex)) continue;
    given.set(hex, key as string);
    stored.push(k);
  }
  if (stored.length === 0) throw new LeaseRangeError('keys must not be empty');
  if (stored.length > MAX_KEYS) throw new LeaseRangeError(`at most ${MAX_KEYS} keys at once, not ${stored.length}`);
  stored.sort(Buffer.compare);
  return { stored, given };
}

/** Microseconds since the epoch (exact, as a bigint) as a Date (millisecond precision, floored). */
function micros(us: bigint): Date {
  const ms = us / 1000n - (us % 1000n < 0n ? 1n : 0n);
  return new Date(Number(ms));
}

function metadataOf(hex: unknown, isStr: unknown): Buffer | string | undefined {
  if (typeof hex !== 'string') return undefined;
  const data = Buffer.from(hex, 'hex');
  if (isStr !== true) return data;
  return fromWtf8(data) ?? data; // a string's bytes, as written (WTF-8); else the bytes
}

interface RawGrant {
  o: string;
  f: string;
  e: string;
  a: string;
  m?: string | null;
  s?: boolean | null;
}

/**
 * The grants of a `holders` JSON text (as the counting statements return it), oldest fence
 * first. The numbers (fences, times in microseconds) are read as their exact digits: a fence
 * may exceed 2^53.
 */
export function grantsOf(text: unknown): Grant[] {
  if (typeof text !== 'string' || text === '') return [];
  // jsonb's text puts a number right after its key; the strings (hex, never a quote) cannot
  // hold such a spelling, so quoting the three numbers keeps every digit.
  const quoted = text.replace(/"([fea])":\s*(-?\d+)/g, '"$1": "$2"');
  const items = JSON.parse(quoted) as RawGrant[];
  const grants = items.map((item): Grant => {
    const grant: Grant = {
      owner: Buffer.from(item.o, 'hex'),
      fence: BigInt(item.f),
      expiresAt: micros(BigInt(item.e)),
      acquiredAt: micros(BigInt(item.a)),
    };
    const metadata = metadataOf(item.m, item.s);
    if (metadata !== undefined) grant.metadata = metadata;
    expiries.set(grant, BigInt(item.e));
    return grant;
  });
  return grants.sort((x, y) => (x.fence < y.fence ? -1 : x.fence > y.fence ? 1 : 0));
}

/** The exact expiry (microseconds) of each grant `grantsOf` read. */
const expiries = new WeakMap<Grant, bigint>();

/** The holder whose grant ends first (to the microsecond): when a slot may free up. */
export function soonest(grants: Grant[]): Grant | undefined {
  let first: Grant | undefined;
  let end = 0n;
  for (const grant of grants) {
    const at = expiries.get(grant) ?? BigInt(grant.expiresAt.getTime()) * 1000n;
    if (first === undefined || at < end) [first, end] = [grant, at];
  }
  return first;
}
