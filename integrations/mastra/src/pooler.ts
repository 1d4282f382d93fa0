/**
 * Pooler mode (`pooler: 'transaction' | 'session'`): statements that a connection pooler such
 * as PgBouncer can carry without any hazard, with the server-side timeouts still in force.
 *
 * A pooler refuses the startup parameters the provider's own pool would otherwise send
 * (`statement_timeout`, `lock_timeout`), and in transaction mode it may hand the next message
 * of a connection to another server session. So each call is one simple-protocol query: the
 * values bound on the client as SQL literals and the timeouts set for that query only,
 *
 *     SET LOCAL statement_timeout = N; SET LOCAL lock_timeout = N; <statement>
 *
 * (one implicit transaction: the settings end with it). Nothing names a prepared statement,
 * so no call can ever run another client's statement. Values are rendered as untyped quoted
 * literals, exactly what node-postgres sends as untyped parameters, so the server infers
 * their types from the statement as it does for `$n`.
 */

import pg from 'pg';

import { LeaseTypeError } from './errors.js';

export type Pooler = 'transaction' | 'session';

/** `pooler` checked: undefined (straight to the server), 'transaction' or 'session'. */
export function checkPooler(value: unknown): Pooler | undefined {
  if (value === undefined || value === 'transaction' || value === 'session') return value;
  const shown = typeof value === 'string' ? JSON.stringify(value) : String(value);
  throw new LeaseTypeError(`pooler must be "transaction" or "session", not ${shown}`);
}

/**
 * The prefix that sets the server-side timeouts (`ms`) for the one query it starts, and pins
 * the settings text results depend on (simple-protocol results are text), which a pooled
 * session may carry from another client or a database setting. (The search path is not
 * pinned: every statement names its objects in full, and the event tables' trigger functions
 * find their tables through it.)
 */
export function timeoutPrefix(ms: number): string {
  const n = Math.max(1, Math.round(ms));
  return (
    `SET LOCAL statement_timeout = ${n}; SET LOCAL lock_timeout = ${n}; ${PINNED}`
  );
}

const PINNED =
  "SET LOCAL DateStyle = 'ISO, MDY'; SET LOCAL TimeZone = 'UTC'; SET LOCAL IntervalStyle = 'postgres'; " +
  "SET LOCAL extra_float_digits = 3; SET LOCAL bytea_output = 'hex'; ";

/** A value as an untyped SQL literal (`NULL`, a quoted string, `E'\\x..'` for bytes). */
export function literal(value: unknown): string {
  if (value === null || value === undefined) return 'NULL';
  if (Buffer.isBuffer(value)) return `E'\\\\x${value.toString('hex')}'`;
  if (typeof value === 'string') return quote(value);
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new LeaseTypeError(`cannot send ${value} to the database`);
    return `'${String(value)}'`;
  }
  if (typeof value === 'bigint') return `'${value.toString()}'`;
  if (typeof value === 'boolean') return value ? "'true'" : "'false'";
  if (Array.isArray(value)) return byteArray(value);
  throw new LeaseTypeError(`cannot send a ${typeof value} to the database behind a pooler`);
}

/**
 * An array of Buffers (the keys of an all-or-none call, `bytea[]`) as an untyped literal: the
 * array's text, each element `"\\x<hex>"`, in an `E''` string (its backslashes doubled), so
 * `standard_conforming_strings` cannot change it.
 */
function byteArray(values: unknown[]): string {
  const elements = values.map((value) => {
    if (!Buffer.isBuffer(value)) throw new LeaseTypeError('only arrays of Buffers can be sent behind a pooler');
    return `"\\\\x${value.toString('hex')}"`;
  });
  return `E'{${elements.join(',').replaceAll('\\', '\\\\')}}'`;
}

function quote(text: string): string {
  if (text.includes('\0')) throw new LeaseTypeError('a text value cannot contain NUL');
  // node-postgres's own quoting: E'' (read alike whatever standard_conforming_strings says)
  // when the text has a backslash, after a space this drops.
  return pg.escapeLiteral(text).trimStart();
}

/** A statement split at its `$n` placeholders: `parts[i]`, value `slots[i]`, `parts[i + 1]`... */
interface Template {
  parts: string[];
  slots: number[];
}

const templates = new Map<string, Template>();
const CACHED = 256; // statement texts kept split (the catalogue has a few dozen)

function split(text: string): Template {
  const parts: string[] = [];
  const slots: number[] = [];
  let start = 0;
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (c === "'" || c === '"') {
      i = closing(text, i, c);
    } else if (c === '-' && text[i + 1] === '-') {
      const end = text.indexOf('\n', i);
      i = end < 0 ? text.length : end;
    } else if (c === '$' && isDigit(text[i + 1]) && !/[\w$]/.test(text[i - 1] ?? ' ')) {
      let j = i + 1;
      while (isDigit(text[j])) j++;
      parts.push(text.slice(start, i));
      slots.push(Number(text.slice(i + 1, j)) - 1);
      start = i = j;
    } else {
      i++;
    }
  }
  parts.push(text.slice(start));
  return { parts, slots };
}

function isDigit(c: string | undefined): boolean {
  return c !== undefined && c >= '0' && c <= '9';
}

/** Past the quoted string or identifier that starts at `start` (a doubled quote stays inside). */
function closing(text: string, start: number, q: string): number {
  let i = start + 1;
  while (i < text.length) {
    if (text[i] === q) {
      if (text[i + 1] !== q) return i + 1;
      i++;
    }
    i++;
  }
  return text.length;
}

/** `text` with each `$n` replaced by `literal(values[n - 1])`; every placeholder needs a value. */
export function render(text: string, values: readonly unknown[]): string {
  let found = templates.get(text);
  if (found === undefined) {
    if (templates.size >= CACHED) templates.clear();
    found = split(text);
    templates.set(text, found);
  }
  const { parts, slots } = found;
  let out = parts[0] ?? '';
  for (let i = 0; i < slots.length; i++) {
    const slot = slots[i] as number;
    if (slot < 0 || slot >= values.length) {
      throw new LeaseTypeError(`the statement needs $${slot + 1} and has ${values.length} values`);
    }
    out += literal(values[slot]) + (parts[i + 1] ?? '');
  }
  return out;
}
