/**
 * What `PostgresLeaseProvider` is built with (its connection, its options, its logger), and how
 * a log line shows a key. `provider.ts` re-exports them.
 */

import type { Pool } from 'pg';

import type { Pooler } from './pooler.js';

/** Bounds each call end to end (checkout, connect, statement) unless `timeoutMs` says otherwise. */
export const DEFAULT_TIMEOUT_MS = 5_000;

/** Where the provider reports a failed acquire (default `console`). */
export interface LeaseLogger {
  error(message: string, ...args: unknown[]): void;
}

export type ConnectionOptions = { connectionString: string } | { pool: Pool };

export interface ProviderOptions {
  /** The leases table (default `leases`). */
  table?: string | undefined;
  /** Its schema (default: the connection's search path, as in Python). */
  schema?: string | undefined;
  /** Bound on each call in milliseconds (default 5000). */
  timeoutMs?: number | undefined;
  /** Connections of the provider's own pool (default 10; ignored with `{ pool }`). */
  maxConnections?: number | undefined;
  /**
   * Where a failed `acquireLease` is reported, at error level with its key (default
   * `console`): Mastra 1.71's runtime treats a rejected acquire as won (see the README).
   */
  logger?: LeaseLogger | undefined;
  /**
   * The connection reaches PostgreSQL through a pooler such as PgBouncer, in `'transaction'`
   * or `'session'` pooling: no startup parameter but `application_name`, and each call one
   * simple query with its values bound on the client and the server-side timeouts set inside
   * it (see pooler.ts). Default: straight to the server.
   */
  pooler?: Pooler | undefined;
}

/** A key or owner for a log line: quoted with escapes, its head only when long. */
export function showKey(text: unknown): string {
  if (typeof text !== 'string') return `(not a string: ${typeof text})`;
  const shown = JSON.stringify(text.length > 200 ? text.slice(0, 200) : text);
  return text.length > 200 ? `${shown}... (${text.length} UTF-16 units)` : shown;
}
