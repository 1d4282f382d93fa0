/**
 * `PostgresLeaseProvider`: Mastra's `LeaseProvider` on the sql_lease table in PostgreSQL.
 *
 * Same table, same statements (from the exported catalogue) and so the same semantics as the
 * Python `sql_lease.SqlLeaseProvider`: one conditional statement per operation in autocommit,
 * judged by the database clock (`clock_timestamp()`); keys and owners stored as their UTF-8
 * bytes (`bytea`, so NUL is an ordinary character); a fence from one sequence per table that
 * grows with every new tenure; a failed acquire always names the holder. Counting leases,
 * metadata and all-or-none acquires are extensions (counting.ts), on the same rows as Python's.
 */

import type { Pool } from 'pg';

import { buildStatements, catalogue, quoteIdent, type Statements } from './catalogue.js';
import { ContentionHints } from './contention.js';
import { CountingCalls } from './counting.js';
import { checkKeys, checkLimit, checkMetadata, isReserved, type StoredMetadata } from './counting-values.js';
import { LeaseError, LeaseTypeError } from './errors.js';
import { Executor, type Row } from './execute.js';
import { createPool, describeWhere, poolWhere } from './pool.js';
import { DEFAULT_TIMEOUT_MS, showKey, type ConnectionOptions, type LeaseLogger, type ProviderOptions } from './provider-options.js';
import { checkPooler } from './pooler.js';
import { resolveHome } from './schema-resolve.js';
import { ServerFunctions } from './server-functions.js';
import { decodeName } from './keys.js';
import type { AcquireAllResult, AcquireOptions, AcquireResult, FencedAcquireResult, Lease, RawAcquire, Tenure, TransferOptions } from './lease-types.js';
import { toDate } from './result-types.js';
import { checkIdentifier, checkKey, checkName, checkTimeout, checkTtl } from './validate.js';

export type { AcquireAllResult, AcquireOptions, AcquireResult, FencedAcquireResult, Lease, Tenure, TransferOptions } from './lease-types.js';
export { DEFAULT_TIMEOUT_MS, showKey, type ConnectionOptions, type LeaseLogger, type ProviderOptions } from './provider-options.js';

function tenure(row: Row | undefined, operation: string): Tenure | undefined {
  return row === undefined ? undefined : { fence: BigInt(row[0] as string), expiresAt: toDate(row[1], operation, true) };
}

const NO_METADATA: StoredMetadata = { data: null, isStr: null };

export class PostgresLeaseProvider {
  /** The statements, once the schema is known (at construction when configured). */
  #sql: Statements | undefined;
  #resolving: Promise<Statements> | undefined;
  readonly #pooled: boolean;
  readonly #where: string;
  /** Behind a pooler: the server functions' calls (set up once the table's schema is known). */
  readonly #functions: ServerFunctions | undefined;
  readonly #pool: Pool;
  readonly #ownsPool: boolean;
  readonly #run: Executor;
  readonly #table: string;
  readonly #schema: string | undefined;
  readonly #logger: LeaseLogger;
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
  /** Counting leases, metadata, all-or-none; the fall-through of plain calls (counting.ts). */
  readonly #counting: CountingCalls;

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
    const logger = options.logger ?? console;
    if (typeof logger !== 'object' || logger === null || typeof logger.error !== 'function') {
      throw new LeaseTypeError('logger must have an error() method');
    }
    this.#logger = logger;
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
    this.#sql = schema === undefined || pooler !== undefined ? undefined : buildStatements(table, schema);
    this.#pooled = pooler !== undefined;
    this.#where = where;
    // Behind a pooler the hot statements go as calls of the table's server functions.
    this.#functions = pooler === undefined ? undefined : new ServerFunctions(table);
    this.#run = new Executor({ pool: this.#pool, timeoutMs, where, table: quoteIdent(table), pooler, functions: this.#functions });
    this.#counting = new CountingCalls(this.#run, () => this.#sql ?? this.#statements());
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

  /** The statements, every relation qualified (the table's schema looked up once: schema-resolve.ts). */
  #statements(): Statements | Promise<Statements> {
    if (this.#sql !== undefined) return this.#sql;
    const options = { table: this.#table, schema: this.#schema, pooled: this.#pooled, where: this.#where };
    this.#resolving ??= resolveHome(this.#run, options).then(
      (home) => {
        const sql = buildStatements(this.#table, this.#schema, home.schema);
        this.#functions?.use(sql, home.schema, home.functions); // the calls are ready with the statements
        return (this.#sql = sql);
      },
      (error: unknown) => {
        this.#resolving = undefined; // tried again on the next call
        throw error;
      },
    );
    return this.#resolving;
  }

  /** The schema the statements use: the configured one, else the resolved default. */
  async resolvedSchema(): Promise<string> {
    this.#open();
    const sql = await this.#statements();
    return this.#schema ?? (sql.table.split('.')[0] as string).slice(1, -1);
  }

  /**
   * Claim `key` for `owner` for `ttlMs`, or report the live holder: exactly Mastra's
   * `{ acquired, owner }`. The holder re-acquiring keeps its fence and extends its expiry; an
   * expired or released key is won with a new fence. A failure is logged at error level with
   * the key before it is thrown (Mastra 1.71 treats a rejected acquire as won).
   *
   * `options` (an extension; Mastra passes three arguments): `limit` makes a counting lease
   * (at most `limit` live owners; a refused caller learns the holder whose grant ends first),
   * `metadata` stores a value with the caller's grant (see `AcquireOptions`, counting.ts).
   */
  async acquireLease(key: string, owner: string, ttlMs: number, options?: AcquireOptions): Promise<AcquireResult> {
    const { acquired, owner: holder } = await this.#logged(key, owner, ttlMs, options);
    return { acquired, owner: holder };
  }

  /** Like `acquireLease`, with the tenure's fence and expiry (the caller's, or the holder's). */
  async acquireFencedLease(key: string, owner: string, ttlMs: number, options?: AcquireOptions): Promise<FencedAcquireResult> {
    const result = await this.#logged(key, owner, ttlMs, options);
    return { ...result, expiresAt: toDate(result.expiresAt, 'acquireLease', result.acquired) };
  }

  async #logged(key: string, owner: string, ttlMs: number, options: AcquireOptions | undefined): Promise<RawAcquire> {
    try {
      return await this.#acquire(key, owner, ttlMs, options);
    } catch (error) {
      this.#logger.error(`[sql_lease] acquireLease failed for key ${showKey(key)} (owner ${showKey(owner)}): ${String(error)}`);
      throw error;
    }
  }

  /** The acquire; its expiry as read (`toDate` turns it into a Date where one is asked for). */
  async #acquire(key: string, owner: string, ttlMs: number, options: AcquireOptions | undefined): Promise<RawAcquire> {
    const k = checkKey(key);
    const o = checkName('owner', owner);
    const ttl = checkTtl('ttlMs', ttlMs);
    if (options !== undefined) {
      if (typeof options !== 'object' || options === null) throw new LeaseTypeError('options must be an object');
      const { limit = 1, metadata } = options;
      if (limit !== 1 || (metadata !== undefined && metadata !== null)) {
        const [n, meta] = [checkLimit(limit), checkMetadata(metadata)];
        this.#open();
        return this.#counting.acquire(key, k, o, owner, ttl, n, meta);
      }
    }
    this.#open();
    const hints = this.#hints;
    const started = performance.now();
    let budget: number | undefined; // the first statement gets the whole timeout, a second what is left
    if (hints.contended(key)) {
      // Look before writing (see contention.ts): a live other holder is the answer.
      const row = (await this.#run.run('acquireLease', false, (this.#sql ?? (await this.#statements())).holder, [k]))[0];
      if (row !== undefined && isReserved(row[0])) return this.#counting.acquire(key, k, o, owner, ttl, 1, NO_METADATA);
      if (row !== undefined && !o.equals(row[0] as Buffer)) {
        hints.held(key);
        this.acquireReads++;
        return {
          acquired: false,
          owner: decodeName(row[0] as Buffer, 'owner', k, 'acquireLease'),
          fence: BigInt(row[1] as string),
          expiresAt: row[2],
        };
      }
      budget = this.#run.timeoutMs - (performance.now() - started);
    }
    for (;;) {
      const rows = await this.#run.run('acquireLease', true, (this.#sql ?? (await this.#statements())).acquire, [k, o, ttl], budget);
      for (const row of rows) {
        if (row[0] === true) {
          hints.free(key);
          return { acquired: true, owner, fence: BigInt(row[1] as string), expiresAt: row[2] };
        }
      }
      const first = rows[0];
      // A counting row (or a lease with metadata): judged as a counting acquire with limit 1.
      if (first !== undefined && isReserved(first[3])) return this.#counting.acquire(key, k, o, owner, ttl, 1, NO_METADATA);
      if (first !== undefined && !o.equals(first[3] as Buffer)) {
        hints.held(key);
        return {
          acquired: false,
          owner: decodeName(first[3] as Buffer, 'owner', k, 'acquireLease'),
          fence: BigInt(first[1] as string),
          expiresAt: first[2],
        };
      }
      // A concurrent writer committed after this statement's snapshot: it neither won nor saw
      // the winner. Run it again; the next snapshot sees that writer (as the Python provider).
      this.acquireReruns++;
      budget = this.#run.timeoutMs - (performance.now() - started);
    }
  }

  /** The live owner of `key` (of a counting lease: the oldest holder), or undefined. */
  async getLeaseOwner(key: string): Promise<string | undefined> {
    const k = checkKey(key);
    this.#open();
    const rows = await this.#run.run('getLeaseOwner', false, (this.#sql ?? (await this.#statements())).get_owner, [k]);
    const row = rows[0];
    if (row === undefined) return undefined;
    if (isReserved(row[0])) return (await this.#counting.holders('getLeaseOwner', key, k))[0]?.owner;
    return decodeName(row[0] as Buffer, 'owner', k, 'getLeaseOwner');
  }

  /**
   * The live lease of `key` (owner, fence, times, metadata), or undefined; of a counting lease,
   * its oldest holder. An extension to Mastra's API.
   */
  async getLease(key: string): Promise<Lease | undefined> {
    const k = checkKey(key);
    this.#open();
    const rows = await this.#run.run('getLease', false, (this.#sql ?? (await this.#statements())).get_lease, [k]);
    const row = rows[0];
    if (row === undefined) return undefined;
    if (isReserved(row[0])) return (await this.#counting.holders('getLease', key, k))[0];
    return {
      key,
      owner: decodeName(row[0] as Buffer, 'owner', k, 'getLease'),
      fence: BigInt(row[1] as string),
      expiresAt: toDate(row[2], 'getLease'),
      acquiredAt: toDate(row[3], 'getLease'),
    };
  }

  /**
   * The live holders of `key`, oldest grant first, each with its fence, times and metadata (a
   * plain lease: its one holder; a free key: none). An extension to Mastra's API.
   */
  async getLeaseHolders(key: string): Promise<Lease[]> {
    const k = checkKey(key);
    this.#open();
    return this.#counting.holders('getLeaseHolders', key, k);
  }

  /** End `owner`'s live lease on `key` (or its grant of a counting lease); a no-op when `owner` does not hold it. */
  async releaseLease(key: string, owner: string): Promise<void> {
    await this.#release('releaseLease', key, owner);
  }

  /** Extend `owner`'s live lease (or grant) to now + `ttlMs`; false when the lease was lost. */
  async renewLease(key: string, owner: string, ttlMs: number): Promise<boolean> {
    return (await this.#renew('renewLease', key, owner, ttlMs)) !== undefined;
  }

  /**
   * Hand `fromOwner`'s live lease (or grant) to `toOwner` (new fence, expiry now + `ttlMs`) in
   * one statement, so the key is never free in between; false when `fromOwner` did not hold
   * it (or `toOwner` already holds a grant of the key). `options.metadata` (an extension):
   * the new owner's metadata, else the lease's is kept.
   */
  async transferLease(key: string, fromOwner: string, toOwner: string, ttlMs: number, options?: TransferOptions): Promise<boolean> {
    return (await this.#transfer('transferLease', key, fromOwner, toOwner, ttlMs, options)) !== undefined;
  }

  /**
   * Take every key of `keys` for `owner` as plain leases, or none, in one statement (rows
   * locked in sorted order of the stored keys, so two such calls never deadlock). Keys the
   * owner already holds are renewed (fences kept). Refused: nothing changed, and the result
   * names the first blocking key and its holder. An extension to Mastra's API.
   */
  async acquireLeases(keys: Iterable<string>, owner: string, ttlMs: number): Promise<AcquireAllResult> {
    const checked = checkKeys(keys);
    const o = checkName('owner', owner);
    const ttl = checkTtl('ttlMs', ttlMs);
    this.#open();
    return this.#counting.acquireAll(checked, o, ttl, (key) => this.getLeaseOwner(key));
  }

  /** Release `owner`'s live plain leases among `keys` in one statement; how many were released. */
  async releaseLeases(keys: Iterable<string>, owner: string): Promise<number> {
    const checked = checkKeys(keys);
    const o = checkName('owner', owner);
    this.#open();
    return this.#counting.releaseAll(checked, o);
  }

  // The forms below are the same operations, reporting what the statement reported: the fence
  // and the database time. Extensions to Mastra's API, for fencing and for checking invariants
  // in database time.

  /** Like `releaseLease`; the ended tenure (`at`: when it ended), or undefined for a no-op. */
  async release(key: string, owner: string): Promise<{ fence: bigint; at: Date } | undefined> {
    const row = await this.#release('release', key, owner);
    return row === undefined ? undefined : { fence: BigInt(row[0] as string), at: toDate(row[1], 'release') };
  }

  /** Like `renewLease`; the renewed tenure, or undefined when the lease was lost. */
  async renew(key: string, owner: string, ttlMs: number): Promise<Tenure | undefined> {
    return tenure(await this.#renew('renew', key, owner, ttlMs), 'renew');
  }

  /** Like `transferLease`; the new owner's tenure, or undefined when it was not held. */
  async transfer(key: string, fromOwner: string, toOwner: string, ttlMs: number, options?: TransferOptions): Promise<Tenure | undefined> {
    return tenure(await this.#transfer('transfer', key, fromOwner, toOwner, ttlMs, options), 'transfer');
  }

  // Each runs its statement, then on a miss the counting one (the owner may hold a grant of a
  // counting row), and returns its row as read: `[fence, time]` (dates converted by the
  // reporting forms only: the contract's methods never read a time, see result-types.ts).

  async #release(operation: string, key: string, owner: string): Promise<Row | undefined> {
    const [k, o] = [checkKey(key), checkName('owner', owner)];
    this.#open();
    const row = (await this.#run.run(operation, true, (this.#sql ?? (await this.#statements())).release, [k, o]))[0];
    return row ?? this.#counting.release(operation, k, o);
  }

  async #renew(operation: string, key: string, owner: string, ttlMs: number): Promise<Row | undefined> {
    const [k, o, ttl] = [checkKey(key), checkName('owner', owner), checkTtl('ttlMs', ttlMs)];
    this.#open();
    const row = (await this.#run.run(operation, true, (this.#sql ?? (await this.#statements())).renew, [k, o, ttl]))[0];
    return row ?? this.#counting.renew(operation, k, o, ttl);
  }

  async #transfer(
    operation: string,
    key: string,
    fromOwner: string,
    toOwner: string,
    ttlMs: number,
    options: TransferOptions | undefined,
  ): Promise<Row | undefined> {
    const args: [Buffer, Buffer, Buffer, number] = [
      checkKey(key),
      checkName('fromOwner', fromOwner),
      checkName('toOwner', toOwner),
      checkTtl('ttlMs', ttlMs),
    ];
    if (options !== undefined && (typeof options !== 'object' || options === null)) {
      throw new LeaseTypeError('options must be an object');
    }
    const meta = checkMetadata(options?.metadata);
    this.#open();
    if (meta.data !== null) return this.#counting.transfer(operation, args, meta, false);
    const row = (await this.#run.run(operation, true, (this.#sql ?? (await this.#statements())).transfer, args))[0];
    return row ?? this.#counting.transfer(operation, args, meta, true);
  }

  /** The database server's clock (the clock that judges expiry). */
  async now(): Promise<Date> {
    this.#open();
    const rows: Row[] = await this.#run.run('now', false, (this.#sql ?? (await this.#statements())).now, []);
    return toDate(rows[0]?.[0], 'now');
  }

  /** End the pool if this provider created it; a caller's pool is left alone. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#ownsPool) await this.#pool.end();
  }
}
