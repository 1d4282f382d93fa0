/**
 * The pools this package creates, and where a pool points (for messages, never a password).
 */

import pg from 'pg';
import type { Pool } from 'pg';

import { SERVER_SHARE } from './execute.js';
import { hostListClient, parseHostList, registerHosts } from './hosts.js';
import type { Pooler } from './pooler.js';

/** Where a connection string points, without any password (for messages). */
export function describeWhere(connectionString: string): string {
  try {
    const hosts = parseHostList(connectionString);
    if (hosts !== undefined) return hosts.where;
    const url = new URL(connectionString);
    const user = url.username ? `${decodeURIComponent(url.username)}@` : '';
    return `${url.protocol}//${user}${url.host}${url.pathname}`;
  } catch {
    return 'the configured PostgreSQL database';
  }
}

/** Where a caller's pool points, as far as its options tell, without any password. */
export function poolWhere(pool: Pool): string {
  const options = (pool as { options?: { connectionString?: unknown; host?: unknown; port?: unknown; database?: unknown } })
    .options;
  if (typeof options?.connectionString === 'string') return describeWhere(options.connectionString);
  if (typeof options?.host === 'string' || typeof options?.database === 'string') {
    const port = options.port === undefined ? '' : `:${String(options.port)}`;
    return `postgresql://${String(options.host ?? 'localhost')}${port}/${String(options.database ?? '')}`;
  }
  return "the caller's pool";
}

/**
 * Session settings the package's own pools pin at startup (they win over database and role
 * settings), so that none changes what a statement's text results say: timestamps in ISO form
 * and UTC, intervals in PostgreSQL's form, bytea in hex. Behind a pooler, which refuses
 * startup options, pooler.ts sets the same for each query. (An `options` in the connection
 * string replaces these.)
 */
export const PINNED_OPTIONS =
  '-c DateStyle=ISO,MDY -c TimeZone=UTC -c IntervalStyle=postgres -c extra_float_digits=3 -c bytea_output=hex';

/**
 * The pool a provider (or PubSub) creates for a connection string: `max` connections, and
 * `statement_timeout`/`lock_timeout` at 80% of `timeoutMs` so the server gives up first (as
 * startup parameters; behind a `pooler`, which refuses them, the executor sets them per query).
 *
 * The connect timeout is set on each new connection, not on the pool: a pool-level
 * `connectionTimeoutMillis` arms a timer on every checkout, even of an idle connection, and
 * the executor's deadline already bounds the wait for a checkout.
 */
export function createPool(connectionString: string, timeoutMs: number, max: number, pooler?: Pooler): Pool {
  const serverMs = Math.max(1, Math.round(timeoutMs * SERVER_SHARE));
  // A host list (or target_session_attrs), which node-postgres cannot read: see hosts.ts. Each
  // host gets its share of the deadline to connect, so a silent one leaves time for the next.
  const hosts = parseHostList(connectionString);
  const connectMs = Math.ceil(timeoutMs / (hosts?.targets.length ?? 1));
  class TimedClient extends pg.Client {
    constructor(config?: pg.ClientConfig) {
      super({ ...config, connectionTimeoutMillis: connectMs });
      // node-postgres also emits 'error' on a checked-out client whose server went away (a
      // failover, a restart), where the pool does not listen: without a listener that would
      // end the process. The call in flight gets the same error through its own callback.
      this.on('error', () => undefined);
    }
  }
  const pool = new pg.Pool({
    connectionString: hosts?.urls[0] ?? connectionString,
    max,
    ...(pooler === undefined ? { statement_timeout: serverMs, lock_timeout: serverMs, options: PINNED_OPTIONS } : {}),
    application_name: 'sql_lease_mastra',
    allowExitOnIdle: true,
    Client: hosts === undefined ? TimedClient : hostListClient(hosts, TimedClient),
  });
  if (hosts !== undefined) registerHosts(pool, hosts.targets.length);
  // An idle connection that dies is dropped by the pool; without a listener the error would
  // crash the process.
  pool.on('error', () => undefined);
  return pool;
}
