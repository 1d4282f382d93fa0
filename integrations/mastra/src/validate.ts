/**
 * Argument checks, all run before any I/O. They mirror the Python library's `_validate`: a key
 * or owner is a non-empty string of at most 1024 UTF-8 bytes with no lone surrogate (it is
 * stored as its UTF-8 bytes, so NUL is fine); a TTL is an integer number of milliseconds from
 * 1 ms to 365 days. The limits come from the exported statement catalogue.
 */

import { LeaseRangeError, LeaseTypeError } from './errors.js';
import { catalogue } from './catalogue.js';

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

/** Validate a key or owner; returns its UTF-8 bytes (the stored form). */
export function checkName(what: string, value: unknown): Buffer {
  if (typeof value !== 'string') {
    throw new LeaseTypeError(`${what} must be a string, not ${typeName(value)}`);
  }
  if (!value.isWellFormed()) {
    throw new LeaseRangeError(`${what} is not encodable as UTF-8: it contains a lone surrogate`);
  }
  if (value.length === 0) throw new LeaseRangeError(`${what} must not be empty`);
  const bytes = Buffer.from(value, 'utf8');
  if (bytes.length > MAX_NAME_BYTES) {
    throw new LeaseRangeError(`${what} is ${bytes.length} bytes in UTF-8; the limit is ${MAX_NAME_BYTES}`);
  }
  return bytes;
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

/** Validate a topic or group name: a non-empty string of at most 1024 UTF-8 bytes, no NUL. */
export function checkTopic(what: string, value: unknown): string {
  checkName(what, value);
  if ((value as string).includes('\0')) {
    throw new LeaseRangeError(`${what} must not contain NUL (PostgreSQL text cannot store it)`);
  }
  return value as string;
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
