/**
 * Reading timestamps so that a session setting can never turn one into a wrong value.
 *
 * node-postgres reads `timestamptz` text in PostgreSQL's ISO form only; under another
 * `DateStyle` ('SQL, DMY', a database setting some installations keep) it silently gives
 * `Invalid Date`. The package's own pools pin `DateStyle`, `TimeZone` and `IntervalStyle` at
 * startup (pool.ts) and pooler mode sets them for each query (pooler.ts); a caller's pool may
 * not. So a timestamp not in ISO form is read as a `ForeignTime`, which `toDate` turns into a
 * `LeaseDatabaseError` naming the setting, only where a time is asked for: the contract's
 * methods never read one, so such a session never makes a grant look like a failure.
 */

import pg from 'pg';

import { LeaseDatabaseError } from './errors.js';

/** A timestamp in a form other than ISO (the session's DateStyle is not ISO). */
export class ForeignTime {
  constructor(readonly text: string) {}
}

const ISO = /^-?\d{4,}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d(:\d\d){0,2})?( BC)?$/;
const parseTimestamptz = pg.types.getTypeParser(1184, 'text') as (text: string) => unknown;

function timestamptz(text: string): Date | ForeignTime {
  if (text === 'infinity') return new Date(8.64e15);
  if (text === '-infinity') return new Date(-8.64e15);
  return ISO.test(text) ? (parseTimestamptz(text) as Date) : new ForeignTime(text);
}

/** The per-query `types` of every statement: node-postgres's parsers, timestamptz guarded. */
export const RESULT_TYPES = {
  getTypeParser(oid: number, format?: string): (value: string) => unknown {
    if (oid === 1184 && format !== 'binary') return timestamptz;
    return pg.types.getTypeParser(oid, (format ?? 'text') as 'text') as (value: string) => unknown;
  },
};

/** A timestamp read by `RESULT_TYPES` as a Date, or a `LeaseDatabaseError` naming DateStyle. */
export function toDate(value: unknown, operation: string, granted = false): Date {
  if (value instanceof Date) return value;
  const shown = value instanceof ForeignTime ? JSON.stringify(value.text) : String(value);
  throw new LeaseDatabaseError(
    `${operation}: the database answered the time ${shown}, not in ISO form: the session's DateStyle is not ` +
      `ISO (a pool passed in must keep DateStyle=ISO; the package's own pools pin it)` +
      (granted ? '; the lease WAS acquired (acquiring again as its owner is safe)' : ''),
    { operation, outcomeUnknown: granted },
  );
}
