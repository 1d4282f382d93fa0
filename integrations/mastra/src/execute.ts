/**
 * Running one statement on a pool within a deadline, with failures turned into `LeaseError`s.
 *
 * Each call checks out a connection, sends one unnamed (unprepared) parameterised statement in
 * autocommit and hands the connection back. The deadline bounds the checkout, the connect and
 * the statement together; past it the call throws `LeaseTimeoutError` and the connection is
 * destroyed (so a stuck statement does not hold a pooled connection). The provider's own pool
 * also sets `statement_timeout` and `lock_timeout` on the server to 80% of the timeout, so the
 * server gives up first and cleanly (nothing applied).
 *
 * Retries mirror the Python provider: a checkout that fails to connect is tried once more
 * (nothing was sent); a read whose connection broke is sent once more; a write that may have
 * reached the server is not repeated: it throws with `outcomeUnknown: true`.
 */

import type { Pool, PoolClient } from 'pg';

import { LeaseTimeoutError, isConnectionFailure, sqlState, translate } from './errors.js';

/** A statement's rows, each an array of column values in the catalogue's column order. */
export type Row = unknown[];

const TIMED_OUT: unique symbol = Symbol('timed out');

export interface ExecutorOptions {
  pool: Pool;
  timeoutMs: number;
  where: string;
  table: string;
}

export class Executor {
  readonly #pool: Pool;
  readonly #timeoutMs: number;
  readonly #where: string;
  readonly #table: string;

  constructor(options: ExecutorOptions) {
    this.#pool = options.pool;
    this.#timeoutMs = options.timeoutMs;
    this.#where = options.where;
    this.#table = options.table;
  }

  get timeoutMs(): number {
    return this.#timeoutMs;
  }

  /** Run `text` with `values` within `ms` (default: the whole timeout); return its rows. */
  async run(operation: string, write: boolean, text: string, values: unknown[], ms?: number): Promise<Row[]> {
    const budget = ms ?? this.#timeoutMs;
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<typeof TIMED_OUT>((resolve) => {
      timer = setTimeout(resolve, Math.max(0, budget), TIMED_OUT);
    });
    let sent = false;
    try {
      for (let attempt = 0; ; attempt++) {
        const connecting = this.#pool.connect();
        let client: PoolClient;
        try {
          const got = await Promise.race([connecting, expired]);
          if (got === TIMED_OUT) {
            connecting.then((c) => c.release(), () => undefined);
            throw this.#timeout(operation, false);
          }
          client = got;
        } catch (error) {
          // Nothing was sent yet: one more try on a fresh connection is safe.
          if (attempt === 0 && !(error instanceof LeaseTimeoutError) && isConnectionFailure(error)) continue;
          throw error;
        }
        sent = true;
        const querying = client.query<Row>({ text, values, rowMode: 'array' });
        let outcome: Awaited<typeof querying> | typeof TIMED_OUT;
        try {
          outcome = await Promise.race([querying, expired]);
        } catch (error) {
          if (sqlState(error) !== undefined && !isConnectionFailure(error)) {
            client.release();
            throw error;
          }
          client.release(error instanceof Error ? error : new Error(String(error)));
          if (/not queryable/i.test(error instanceof Error ? error.message : '')) {
            sent = false; // refused before sending: the connection had died while idle
            if (attempt < 2) continue;
          } else if (!write && attempt === 0) {
            continue;
          }
          throw error;
        }
        if (outcome === TIMED_OUT) {
          querying.catch(() => undefined);
          const pid = (client as { processID?: unknown }).processID;
          client.release(true); // destroy: the statement must not keep a pooled connection
          // A backend waiting on a lock does not notice its client left: ask the server to
          // cancel the statement too (best effort, in the background; the outcome stays unknown).
          if (typeof pid === 'number') {
            this.#pool.query('SELECT pg_cancel_backend($1)', [pid]).catch(() => undefined);
          }
          throw this.#timeout(operation, write);
        }
        client.release();
        return outcome.rows;
      }
    } catch (error) {
      throw translate(error, { operation, where: this.#where, table: this.#table, sent: sent && write });
    } finally {
      clearTimeout(timer);
    }
  }

  #timeout(operation: string, sent: boolean): LeaseTimeoutError {
    return new LeaseTimeoutError(`${operation}: no answer from ${this.#where} within ${this.#timeoutMs} ms`, {
      operation,
      outcomeUnknown: sent,
    });
  }
}
