/**
 * `PostgresLeaseProvider`: Mastra's `LeaseProvider` on the sql_lease table in PostgreSQL.
 *
 * Same table, same statements (from the exported catalogue) and so the same semantics as the
 * Python `sql_lease.SqlLeaseProvider`: one conditional statement per operation in autocommit,
 * judged by the database clock (`clock_timestamp()`); keys and owners stored as their UTF-8
 * bytes (`bytea`, so NUL is an ordinary character); a fence from one sequence per table that
 * grows with every new tenure; a failed acquire always names the holder.
 */

import pg from 'pg';
import type { Pool } from 'pg';

import { buildStatements, catalogue, type Statements } from './catalogue.js';
import { ContentionHints } from './contention.js';
import { LeaseError, LeaseTypeError } from './errors.js';
import { Executor, SERVER_SHARE, type Row } from './execute.js';
import { checkPooler, type Pooler } from './pooler.js';
import { ServerFunctions } from './server-functions.js';
import { hostListClient, parseHostList, registerHosts } from './hosts.js';
import { checkIdentifier, checkName, checkTimeout, checkTtl } from './validate.js';

/** Bounds each call end to end (checkout, connect, statement) unless `timeoutMs` says otherwise. */
export const DEFAULT_TIMEOUT_MS = 5_000;

/** What `acquireLease` returns: Mastra's `{ acquired, owner }`, plus the fence and expiry. */
export interface AcquireResult {
  acquired: boolean;
  /** The caller when acquired, else the live holder. */
  owner: string;
  /** The fencing token of the tenure (the caller's, or the holder's). */
  fence: bigint;
  /** When that tenure expires, by the database clock (millisecond precision). */
  expiresAt: Date;
}

/** A tenure as a renew or transfer reports it: its fence and its new expiry. */
export interface Tenure {
  fence: bigint;
  expiresAt: Date;
}

function tenure(row: Row | undefined): Tenure | undefined {
  return row === undefined ? undefined : { fence: BigInt(row[0] as string), expiresAt: row[1] as Date };
}

/** A live lease as `getLease` reads it. */
export interface Lease {
  key: string;
  owner: string;
  fence: bigint;
  expiresAt: Date;
  acquiredAt: Date;
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
   * The connection reaches PostgreSQL through a pooler such as PgBouncer, in `'transaction'`
   * or `'session'` pooling: no startup parameter but `application_name`, and each call one
   * simple query with its values bound on the client and the server-side timeouts set inside
   * it (see pooler.ts). Default: straight to the server.
   */
  pooler?: Pooler | undefined;
}

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
    ...(pooler === undefined ? { statement_timeout: serverMs, lock_timeout: serverMs } : {}),
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

export class PostgresLeaseProvider {
  readonly #sql: Statements;
  readonly #pool: Pool;
  readonly #ownsPool: boolean;
  readonly #run: Executor;
  readonly #table: string;
  readonly #schema: string | undefined;
  #closed = false;
  /**
   * How often acquire ran its statement again because a concurrent writer committed between
   * its snapshot and its write (diagnostics, as the Python provider's `acquire_reruns`).
   */
  acquireReruns = 0;
  /**
   * How many acquires were answered by reading the holder of a contended key, without the
   * full statement (diagnostics, as the Python provider's `acquire_reads`; see `contention.ts`).
   */
  acquireReads = 0;
  readonly #hints = new ContentionHints();

  /**
   * Leases in `schema.table` of the database of `connectionString` (the provider creates and
   * owns a pool, ended by `close()`), or of a caller's `pool` (never ended by the provider).
   */
  constructor(connection: ConnectionOptions, options: ProviderOptions = {}) {
    if (typeof connection !== 'object' || connection === null) {
      throw new LeaseTypeError('connection must be { connectionString } or { pool }');
    }
    if (typeof options !== 'object' || options === null) {
      throw new LeaseTypeError('options must be an object');
    }
    const table = checkIdentifier('table', options.table ?? catalogue.naming.default_table);
    const schema = options.schema === undefined ? undefined : checkIdentifier('schema', options.schema);
    const timeoutMs = checkTimeout('timeoutMs', options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    const max = options.maxConnections ?? 10;
    if (!Number.isInteger(max) || max < 1) throw new LeaseTypeError('maxConnections must be a positive integer');
    const pooler = checkPooler(options.pooler);
    let where: string;
    if ('pool' in connection) {
      const pool = connection.pool as unknown;
      if (typeof pool !== 'object' || pool === null || typeof (pool as Pool).connect !== 'function') {
        throw new LeaseTypeError('pool must be a node-postgres Pool');
      }
      this.#pool = connection.pool;
      this.#ownsPool = false;
      where = poolWhere(connection.pool);
    } else if (typeof (connection as { connectionString?: unknown }).connectionString === 'string') {
      this.#pool = createPool(connection.connectionString, timeoutMs, max, pooler);
      this.#ownsPool = true;
      where = describeWhere(connection.connectionString);
    } else {
      throw new LeaseTypeError('connection must be { connectionString: string } or { pool }');
    }
    this.#table = table;
    this.#schema = schema;
    this.#sql = buildStatements(table, schema);
    // Behind a pooler the hot statements go as calls of the table's server functions.
    const functions = pooler === undefined ? undefined : new ServerFunctions(table, schema);
    this.#run = new Executor({ pool: this.#pool, timeoutMs, where, table: this.#sql.table, pooler, functions });
  }

  /** The leases table's name. */
  get table(): string {
    return this.#table;
  }

  get schema(): string | undefined {
    return this.#schema;
  }

  /** Milliseconds that bound each call. */
  get timeoutMs(): number {
    return this.#run.timeoutMs;
  }

  /** True once `close()` was called (every call then throws a `LeaseError`). */
  get closed(): boolean {
    return this.#closed;
  }

  #open(): void {
    if (this.#closed) throw new LeaseError('the PostgresLeaseProvider is closed');
  }

  /**
   * Claim `key` for `owner` for `ttlMs`, or report the live holder. The holder re-acquiring
   * keeps its fence and extends its expiry; an expired or released key is won with a new fence.
   */
  async acquireLease(key: string, owner: string, ttlMs: number): Promise<AcquireResult> {
    const k = checkName('key', key);
    const o = checkName('owner', owner);
    const ttl = checkTtl('ttlMs', ttlMs);
    this.#open();
    const hints = this.#hints;
    const started = performance.now();
    let budget: number | undefined; // the first statement gets the whole timeout, a second what is left
    if (hints.contended(key)) {
      // Look before writing (see contention.ts): a live other holder is the answer.
      const row = (await this.#run.run('acquireLease', false, this.#sql.holder, [k]))[0];
      if (row !== undefined && !o.equals(row[0] as Buffer)) {
        hints.held(key);
        this.acquireReads++;
        return {
          acquired: false,
          owner: (row[0] as Buffer).toString('utf8'),
          fence: BigInt(row[1] as string),
          expiresAt: row[2] as Date,
        };
      }
      budget = this.#run.timeoutMs - (performance.now() - started);
    }
    for (;;) {
      const rows = await this.#run.run('acquireLease', true, this.#sql.acquire, [k, o, ttl], budget);
      for (const row of rows) {
        if (row[0] === true) {
          hints.free(key);
          return { acquired: true, owner, fence: BigInt(row[1] as string), expiresAt: row[2] as Date };
        }
      }
      const first = rows[0];
      if (first !== undefined && !o.equals(first[3] as Buffer)) {
        hints.held(key);
        return {
          acquired: false,
          owner: (first[3] as Buffer).toString('utf8'),
          fence: BigInt(first[1] as string),
          expiresAt: first[2] as Date,
        };
      }
      // A concurrent writer committed after this statement's snapshot: it neither won nor saw
      // the winner. Run it again; the next snapshot sees that writer (as the Python provider).
      this.acquireReruns++;
      budget = this.#run.timeoutMs - (performance.now() - started);
    }
  }

  /** The live owner of `key`, or undefined. */
  async getLeaseOwner(key: string): Promise<string | undefined> {
    const k = checkName('key', key);
    this.#open();
    const rows = await this.#run.run('getLeaseOwner', false, this.#sql.get_owner, [k]);
    const row = rows[0];
    return row === undefined ? undefined : (row[0] as Buffer).toString('utf8');
  }

  /** The live lease of `key` (owner, fence, times), or undefined. An extension to Mastra's API. */
  async getLease(key: string): Promise<Lease | undefined> {
    const k = checkName('key', key);
    this.#open();
    const rows = await this.#run.run('getLease', false, this.#sql.get_lease, [k]);
    const row = rows[0];
    if (row === undefined) return undefined;
    return {
      key,
      owner: (row[0] as Buffer).toString('utf8'),
      fence: BigInt(row[1] as string),
      expiresAt: row[2] as Date,
      acquiredAt: row[3] as Date,
    };
  }

  /** End `owner`'s live lease on `key`; a no-op when `owner` does not hold it. */
  async releaseLease(key: string, owner: string): Promise<void> {
    await this.#release('releaseLease', key, owner);
  }

  /** Extend `owner`'s live lease to now + `ttlMs`; false when the lease was lost. */
  async renewLease(key: string, owner: string, ttlMs: number): Promise<boolean> {
    return (await this.#renew('renewLease', key, owner, ttlMs)) !== undefined;
  }

  /**
   * Hand `fromOwner`'s live lease to `toOwner` (new fence, expiry now + `ttlMs`) in one
   * statement, so the key is never free in between; false when `fromOwner` did not hold it.
   */
  async transferLease(key: string, fromOwner: string, toOwner: string, ttlMs: number): Promise<boolean> {
    return (await this.#transfer('transferLease', key, fromOwner, toOwner, ttlMs)) !== undefined;
  }

  // The forms below are the same operations, reporting what the statement reported: the fence
  // and the database time. Extensions to Mastra's API, for fencing and for checking invariants
  // in database time.

  /** Like `releaseLease`; the ended tenure (`at`: when it ended), or undefined for a no-op. */
  release(key: string, owner: string): Promise<{ fence: bigint; at: Date } | undefined> {
    return this.#release('release', key, owner);
  }

  /** Like `renewLease`; the renewed tenure, or undefined when the lease was lost. */
  renew(key: string, owner: string, ttlMs: number): Promise<Tenure | undefined> {
    return this.#renew('renew', key, owner, ttlMs);
  }

  /** Like `transferLease`; the new owner's tenure, or undefined when it was not held. */
  transfer(key: string, fromOwner: string, toOwner: string, ttlMs: number): Promise<Tenure | undefined> {
    return this.#transfer('transfer', key, fromOwner, toOwner, ttlMs);
  }

  async #release(operation: string, key: string, owner: string): Promise<{ fence: bigint; at: Date } | undefined> {
    const args = [checkName('key', key), checkName('owner', owner)];
    this.#open();
    const row = (await this.#run.run(operation, true, this.#sql.release, args))[0];
    return row === undefined ? undefined : { fence: BigInt(row[0] as string), at: row[1] as Date };
  }

  async #renew(operation: string, key: string, owner: string, ttlMs: number): Promise<Tenure | undefined> {
    const args = [checkName('key', key), checkName('owner', owner), checkTtl('ttlMs', ttlMs)];
    this.#open();
    return tenure((await this.#run.run(operation, true, this.#sql.renew, args))[0]);
  }

  async #transfer(
    operation: string,
    key: string,
    fromOwner: string,
    toOwner: string,
    ttlMs: number,
  ): Promise<Tenure | undefined> {
    const args = [
      checkName('key', key),
      checkName('fromOwner', fromOwner),
      checkName('toOwner', toOwner),
      checkTtl('ttlMs', ttlMs),
    ];
    this.#open();
    return tenure((await this.#run.run(operation, true, this.#sql.transfer, args))[0]);
  }

  /** The database server's clock (the clock that judges expiry). */
  async now(): Promise<Date> {
    this.#open();
    const rows: Row[] = await this.#run.run('now', false, this.#sql.now, []);
    return rows[0]?.[0] as Date;
  }

  /** End the pool if this provider created it; a caller's pool is left alone. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#ownsPool) await this.#pool.end();
  }
}
