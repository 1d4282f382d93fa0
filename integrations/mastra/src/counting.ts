/**
 * The counting-lease, metadata and all-or-none calls of `PostgresLeaseProvider`, and the
 * fall-through of a plain call that met a counting row: exactly the Python library's
 * `sql_lease._sqlprovider.counting` (the statements are its own, from the exported catalogue).
 *
 * The plain statements stay the hot path: a call without options (or `limit: 1`, no metadata)
 * sends exactly the statement it sent before. These statements run when a call asks for them,
 * or when a plain statement met a counting row (its owner is the reserved byte `0xff`): an
 * acquire whose holder is the reserved owner (judged as a counting acquire with `limit: 1`:
 * so a key held with another limit throws `LeaseLimitMismatchError`), a plain release, renewal
 * or transfer that matched nothing (the owner may hold a grant of a counting row: one more
 * statement, on a miss path), a read that found the reserved owner (its oldest holder).
 *
 * On a table from before migration 0009 (a rolling upgrade: no counting columns) the
 * fall-through statements fail with `undefined_column`, and are then taken as the miss they
 * stand for: such a table has no counting rows.
 */

import type { Statements } from './catalogue.js';
import {
  grantsOf,
  isReserved,
  soonest,
  type CheckedKeys,
  type Grant,
  type StoredMetadata,
} from './counting-values.js';
import { LeaseDatabaseError, LeaseLimitMismatchError, LeaseSchemaError } from './errors.js';
import type { Executor, Row } from './execute.js';
import { decodeName } from './keys.js';
import type { AcquireAllResult, Lease, RawAcquire, Tenure } from './lease-types.js';
import { toDate } from './result-types.js';

const UNDEFINED_COLUMN = '42703';

/** How a call finds its statements (the schema may be resolved on first use). */
export type StatementsOf = () => Statements | Promise<Statements>;

/** `grant` as a `Lease` of `key` (its owner decoded, its metadata if any). */
function leaseOf(key: string, k: Buffer, grant: Grant, operation: string): Lease {
  const lease: Lease = {
    key,
    owner: decodeName(grant.owner, 'owner', k, operation),
    fence: grant.fence,
    expiresAt: grant.expiresAt,
    acquiredAt: grant.acquiredAt,
  };
  if (grant.metadata !== undefined) lease.metadata = grant.metadata;
  return lease;
}

/** `o`'s grant in a counting statement's `row` as `[fence, expiry]` (a plain renewal's row), or undefined. */
function grantOf(row: Row | undefined, o: Buffer): Row | undefined {
  if (row === undefined) return undefined;
  const grant = grantsOf(row[2]).find((g) => g.owner.equals(o));
  return grant === undefined ? undefined : [grant.fence, grant.expiresAt];
}

export class CountingCalls {
  readonly #run: Executor;
  readonly #statements: StatementsOf;

  constructor(run: Executor, statements: StatementsOf) {
    this.#run = run;
    this.#statements = statements;
  }

  /**
   * Grant `o` a slot of `k` (`limit` slots), renew its grant (metadata replaced when given),
   * or refuse naming the holder whose grant ends first. Limits that differ throw.
   */
  async acquire(key: string, k: Buffer, o: Buffer, owner: string, ttl: number, limit: number, meta: StoredMetadata): Promise<RawAcquire> {
    const sql = (await this.#statements()).count_acquire;
    const rows = await this.#run.run('acquireLease', true, sql, [k, o, ttl, limit, meta.data, meta.isStr]);
    const row = rows[0];
    if (row === undefined) throw new LeaseDatabaseError('acquireLease: the counting acquire answered no row', { operation: 'acquireLease' });
    if (!isReserved(row[0])) {
      // A live plain lease of another owner (or ours, asked with another limit), left as it was.
      if (limit !== 1) throw new LeaseLimitMismatchError(key, limit, 1);
      return { acquired: false, owner: decodeName(row[0] as Buffer, 'owner', k, 'acquireLease'), fence: BigInt(row[3] as string), expiresAt: row[4] };
    }
    const grants = grantsOf(row[2]);
    const held = row[1] === null ? 1 : Number(row[1]);
    if (grants.length > 0 && held !== limit) throw new LeaseLimitMismatchError(key, limit, held);
    const mine = grants.find((g) => g.owner.equals(o));
    if (mine !== undefined) return { acquired: true, owner, fence: mine.fence, expiresAt: mine.expiresAt };
    const holder = soonest(grants);
    if (holder === undefined) {
      throw new LeaseDatabaseError('acquireLease: the counting acquire neither granted nor named a holder', { operation: 'acquireLease' });
    }
    return { acquired: false, owner: decodeName(holder.owner, 'owner', k, 'acquireLease'), fence: holder.fence, expiresAt: holder.expiresAt };
  }

  /** The live holders of `k`, oldest grant first (a plain lease: its one holder; free: none). */
  async holders(operation: string, key: string, k: Buffer): Promise<Lease[]> {
    const sql = (await this.#statements()).count_holders;
    const row = (await this.#run.run(operation, false, sql, [k]))[0];
    if (row === undefined) return [];
    return grantsOf(row[2]).map((grant) => leaseOf(key, k, grant, operation));
  }

  /** The fall-through of a plain release that missed: `[fence, when]` of the grant removed, or undefined. */
  async release(operation: string, k: Buffer, o: Buffer): Promise<Row | undefined> {
    const sql = (await this.#statements()).count_release;
    const row = await this.#missed(this.#run.run(operation, true, sql, [k, o]));
    return row === undefined ? undefined : [row[1], row[0]];
  }

  /** The fall-through of a plain renewal that missed: `[fence, expiry]` of the renewed grant, or undefined. */
  async renew(operation: string, k: Buffer, o: Buffer, ttl: number): Promise<Row | undefined> {
    const sql = (await this.#statements()).count_renew;
    return grantOf(await this.#missed(this.#run.run(operation, true, sql, [k, o, ttl])), o);
  }

  /**
   * `from`'s live grant (or live plain lease) of `k` handed to `to`, its metadata replaced when
   * given; `[fence, expiry]` of the new grant, or undefined. `fallThrough`: after a plain
   * transfer that missed.
   */
  async transfer(
    operation: string,
    args: [Buffer, Buffer, Buffer, number],
    meta: StoredMetadata,
    fallThrough: boolean,
  ): Promise<Row | undefined> {
    const sql = (await this.#statements()).count_transfer;
    const sent = this.#run.run(operation, true, sql, [...args, meta.data, meta.isStr]);
    return grantOf(fallThrough ? await this.#missed(sent) : (await sent)[0], args[2]);
  }

  /** The first row of `rows`; a table before migration 0009 (no counting columns) as a miss. */
  async #missed(rows: Promise<Row[]>): Promise<Row | undefined> {
    try {
      return (await rows)[0];
    } catch (error) {
      if (error instanceof LeaseSchemaError && error.sqlState === UNDEFINED_COLUMN) return undefined;
      throw error;
    }
  }

  /**
   * Every key of `keys` for `o` as plain leases, or none, in one statement (rows locked in key
   * order). Keys without a row get an expired placeholder row first (a statement can lock only
   * rows that exist), then the statement runs again. `ownerOf` names a counting row's holder.
   */
  async acquireAll(
    keys: CheckedKeys,
    o: Buffer,
    ttl: number,
    ownerOf: (key: string) => Promise<string | undefined>,
  ): Promise<AcquireAllResult> {
    const sql = await this.#statements();
    let rows: Row[] = [];
    for (let attempt = 0; attempt < 3; attempt++) {
      rows = await this.#run.run('acquireLeases', true, sql.acquire_all, [keys.stored, o, ttl]);
      if (rows.every((row) => row[1] !== null)) break;
      await this.#run.run('acquireLeases', true, sql.ensure_rows, [keys.stored]);
    }
    const given = (k: unknown): string => keys.given.get((k as Buffer).toString('hex')) as string;
    const taken = rows.filter((row) => row[1] === true);
    if (taken.length === keys.stored.length) {
      const leases = new Map<string, Tenure>();
      for (const row of taken) {
        leases.set(given(row[0]), { fence: BigInt(row[2] as string), expiresAt: toDate(row[3], 'acquireLeases', true) });
      }
      return { acquired: true, leases };
    }
    const first = rows.find((row) => row[1] === false);
    if (first === undefined) return { acquired: false, leases: new Map() };
    const blockedKey = given(first[0]);
    const holder = first[4];
    const blockedBy =
      holder === null || isReserved(holder)
        ? await ownerOf(blockedKey)
        : decodeName(holder as Buffer, 'owner', first[0] as Buffer, 'acquireLeases');
    return blockedBy === undefined ? { acquired: false, leases: new Map(), blockedKey } : { acquired: false, leases: new Map(), blockedKey, blockedBy };
  }

  /** Release `o`'s live plain leases among `keys` in one statement; how many were released. */
  async releaseAll(keys: CheckedKeys, o: Buffer): Promise<number> {
    const sql = (await this.#statements()).release_all;
    return (await this.#run.run('releaseLeases', true, sql, [keys.stored, o])).length;
  }
}
