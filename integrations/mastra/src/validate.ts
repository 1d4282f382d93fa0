/**
 * Argument checks, all run before any I/O. They mirror the Python library's `_validate`: a key
 * or owner is a non-empty string, stored as its WTF-8 bytes (keys.ts: so NUL and lone
 * surrogates are fine); an owner has at most 1024 such bytes, a longer key is stored under
 * its mapped form (keys.ts); a TTL is an integer number of milliseconds from
 * 1 ms to 365 days. The limits come from the exported statement catalogue.
 */

import { LeaseRangeError, LeaseTypeError } from './errors.js';
import { catalogue } from './catalogue.js';
import { mappedBytes, storedTopic, wtf8 } from './keys.js';

export const MAX_NAME_BYTES: number = catalogue.limits.max_name_bytes;
export const MAX_TTL_MS: number = catalogue.limits.max_ttl_ms;
export const MAX_IDENTIFIER_LENGTH: number = catalogue.naming.identifier_max_length;
const IDENTIFIER = new RegExp(catalogue.naming.identifier_pattern);
/** A day: the longest per-call timeout (PostgreSQL's statement_timeout tops out near 24 days). */
export const MAX_TIMEOUT_MS = 86_400_000;

function typeName(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (Buffer.isBuffer(value)) return 'a Buffer';
  return typeof value === 'object' ? `a ${value.constructor?.name ?? 'object'}` : `a ${typeof value}`;
}

/**
 * Validate an owner; returns its stored form, the WTF-8 bytes (UTF-8 for valid text, a lone
 * surrogate as its 3-byte form: see keys.ts). An owner is returned to callers as it is, so it
 * is never mapped: over 1024 bytes it is refused.
 */
export function checkName(what: string, value: unknown): Buffer {
  if (typeof value !== 'string') {
    throw new LeaseTypeError(`${what} must be a string, not ${typeName(value)}`);
  }
  if (value.length === 0) throw new LeaseRangeError(`${what} must not be empty`);
  const bytes = wtf8(value);
  if (bytes.length > MAX_NAME_BYTES) {
    throw new LeaseRangeError(`${what} is ${bytes.length} bytes in UTF-8; the limit is ${MAX_NAME_BYTES}`);
  }
  return bytes;
}

/**
 * Validate a key; returns its stored form: its WTF-8 bytes, or for a key over 1024 bytes
 * those of `mapLongKey(key)` (so no key but the empty one is refused; see keys.ts).
 */
export function checkKey(value: unknown): Buffer {
  if (typeof value !== 'string') {
    throw new LeaseTypeError(`key must be a string, not ${typeName(value)}`);
  }
  if (value.length === 0) throw new LeaseRangeError('key must not be empty');
  return mappedBytes(wtf8(value));
}

/** Validate a TTL in milliseconds: an integer number from 1 to 365 days. */
export function checkTtl(what: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value)) {
    const shown = typeof value === 'number' ? String(value) : typeName(value);
    throw new LeaseTypeError(`${what} must be an integer number of milliseconds, not ${shown}`);
  }
  if (value <= 0 || value > MAX_TTL_MS) {
    throw new LeaseRangeError(`${what} must be between 1 and ${MAX_TTL_MS} (365 days), not ${value}`);
  }
  return value;
}

/** Validate a table or schema name: a plain SQL identifier of at most 40 characters. */
export function checkIdentifier(what: string, value: unknown): string {
  if (typeof value !== 'string') {
    throw new LeaseTypeError(`${what} must be a string, not ${typeName(value)}`);
  }
  if (!IDENTIFIER.test(value) || value.length > MAX_IDENTIFIER_LENGTH) {
    throw new LeaseRangeError(
      `${what} must be a plain SQL identifier (letters, digits, underscore; not starting with a digit; ` +
        `at most ${MAX_IDENTIFIER_LENGTH} characters), not ${JSON.stringify(value)}`,
    );
  }
  return value;
}

/** Validate a per-call timeout: a number of milliseconds above 0 and at most a day. */
export function checkTimeout(what: string, value: unknown): number {
  if (typeof value !== 'number' || Number.isNaN(value)) {
    throw new LeaseTypeError(`${what} must be a number of milliseconds, not ${typeName(value)}`);
  }
  if (!(value > 0 && value <= MAX_TIMEOUT_MS)) {
    throw new LeaseRangeError(`${what} must be above 0 and at most ${MAX_TIMEOUT_MS} ms (one day), not ${value}`);
  }
  return value;
}

/**
 * Validate a topic or group name (a non-empty string); returns its stored form: itself, or
 * when PostgreSQL text cannot hold it within 1024 bytes (NUL, a lone surrogate, longer) the
 * mapped form of `storedTopic` (keys.ts), so no topic Mastra makes is refused.
 */
export function checkTopic(what: string, value: unknown): string {
  if (typeof value !== 'string') {
    throw new LeaseTypeError(`${what} must be a string, not ${typeName(value)}`);
  }
  if (value.length === 0) throw new LeaseRangeError(`${what} must not be empty`);
  return storedTopic(value);
}

/** Validate a duration option in milliseconds: an integer from `min` to 365 days. */
export function checkMs(what: string, value: unknown, min = 1): number {
  if (typeof value !== 'number' || !Number.isInteger(value)) {
    throw new LeaseTypeError(`${what} must be an integer number of milliseconds, not ${typeName(value)}`);
  }
  if (value < min || value > MAX_TTL_MS) {
    throw new LeaseRangeError(`${what} must be between ${min} and ${MAX_TTL_MS} (365 days), not ${value}`);
  }
  return value;
}
