/**
 * Running one statement on a pool within a deadline, with failures turned into `LeaseError`s.
 *
 * Each call checks out a connection, sends one unnamed (unprepared) parameterised statement in
 * autocommit and hands the connection back. The deadline bounds the checkout, the connect and
 * the statement together; past it the call throws `LeaseTimeoutError` and the connection is
 * destroyed (so a stuck statement does not hold a pooled connection). The provider's own pool
 * also sets `statement_timeout` and `lock_timeout` on the server to 80% of the timeout, so the
 * server gives up first and cleanly (nothing applied). Behind a pooler (`pooler`: see
 * pooler.ts) each call is instead one simple query with its values bound on the client and the
 * same timeouts set inside it; a timed-out call then sends no `pg_cancel_backend` (the process
 * id a pooler reports is its own, not a server's): the server-side timeout ends the statement.
 *
 * Retries mirror the Python provider: a checkout that fails to connect is tried once more
 * (nothing was sent); a read whose connection broke is sent once more; a write that may have
 * reached the server is not repeated: it throws with `outcomeUnknown: true`.
 */

import type { Pool, PoolClient } from 'pg';

import { LeaseTimeoutError, isConnectionFailure, isReadOnly, sqlState, translate } from './errors.js';
import { connectRetries, serverReadOnly } from './hosts.js';
import { render, timeoutPrefix, type Pooler } from './pooler.js';
import { RESULT_TYPES } from './result-types.js';
import type { ServerFunctions } from './server-functions.js';

/** A statement's rows, each an array of column values in the catalogue's column order. */
export type Row = unknown[];

export interface ExecutorOptions {
  pool: Pool;
  timeoutMs: number;
  where: string;
  table: string;
  /** The pool reaches PostgreSQL through a connection pooler (see pooler.ts). */
  pooler?: Pooler | undefined;
  /** Behind a pooler: the lease statements sent as calls of the server functions (server-functions.ts). */
  functions?: ServerFunctions | undefined;
}

const guarded = new WeakSet<PoolClient>();
const ignore = (): void => undefined;

/** The server-side statement and lock timeout, as a share of the client-side timeout. */
export const SERVER_SHARE = 0.8;

export class Executor {
  readonly #pool: Pool;
  readonly #timeoutMs: number;
  readonly #where: string;
  readonly #table: string;
  /** Behind a pooler: the `SET LOCAL` timeouts that start every query; else undefined. */
  readonly #prefix: string | undefined;
  readonly #functions: ServerFunctions | undefined;

  constructor(options: ExecutorOptions) {
    this.#functions = options.pooler === undefined ? undefined : options.functions;
    this.#pool = options.pool;
    this.#timeoutMs = options.timeoutMs;
    this.#where = options.where;
    this.#table = options.table;
    this.#prefix = options.pooler === undefined ? undefined : timeoutPrefix(options.timeoutMs * SERVER_SHARE);
  }

  get timeoutMs(): number {
    return this.#timeoutMs;
  }

  /**
   * Run `text` with `values` within `ms` (default: the whole timeout); return its rows.
   *
   * Written with node-postgres's callback API (one promise per call, no races): this is the
   * per-statement path of every lease operation, and the benchmark holds it to raw `pg`.
   */
  run(operation: string, write: boolean, text: string, values: unknown[], ms?: number): Promise<Row[]> {
    const functions = this.#functions;
    const call = functions?.call(text);
    if (functions === undefined || call === undefined) return this.#send(operation, write, text, values, ms);
    return this.#call(functions, call, operation, write, text, values, ms);
  }

  /**
   * `call` (the server function's call for `text`) within the one deadline; `text` itself,
   * already qualified, is sent after `undefined_function` only (nothing ran).
   */
  async #call(
    functions: ServerFunctions,
    call: string,
    operation: string,
    write: boolean,
    text: string,
    values: unknown[],
    ms?: number,
  ): Promise<Row[]> {
    const end = performance.now() + (ms ?? this.#timeoutMs);
    try {
      return await this.#send(operation, write, call, values, ms);
    } catch (error) {
      if (!functions.fallBack(call, error)) throw error;
      return this.#send(operation, write, text, values, end - performance.now());
    }
  }

  #send(operation: string, write: boolean, text: string, values: unknown[], ms?: number): Promise<Row[]> {
    const prefix = this.#prefix;
    let simple: string | undefined;
    try {
      if (prefix !== undefined) simple = prefix + render(text, values);
    } catch (error) {
      return Promise.reject(error as Error); // a value render cannot send: nothing was sent
    }
    return new Promise<Row[]>((resolve, reject) => {
      let settled = false;
      let sent = false;
      let attempt = 0;
      /** The checkout whose statement is in flight (undefined while checking out). */
      let current: PoolClient | undefined;
      const fail = (error: unknown): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        reject(translate(error, { operation, where: this.#where, table: this.#table, sent: sent && write }));
      };
      const timer = setTimeout(() => {
        if (settled) return;
        const client = current;
        if (client === undefined) return fail(this.#timeout(operation, false)); // the checkout is released when it comes
        current = undefined;
        const pid = (client as { processID?: unknown }).processID;
        client.release(true); // destroy: the statement must not keep a pooled connection
        // A backend waiting on a lock does not notice its client left: ask the server to
        // cancel the statement too (best effort, in the background; the outcome stays unknown).
        if (prefix === undefined && typeof pid === 'number') this.#pool.query('SELECT pg_cancel_backend($1)', [pid]).catch(() => undefined);
        fail(this.#timeout(operation, write));
      }, Math.max(0, ms ?? this.#timeoutMs));
      const query = (client: PoolClient): void => {
        sent = true;
        current = client;
        // Timestamps are read only in ISO form (result-types.ts): never an Invalid Date.
        const config =
          simple === undefined
            ? { text, values, rowMode: 'array', types: RESULT_TYPES }
            : { text: simple, rowMode: 'array', types: RESULT_TYPES };
        client.query<Row>(config, (error: Error | null | undefined, result) => {
          if (current !== client) return; // timed out: already destroyed and reported
          current = undefined;
          if (!error) {
            client.release();
            settled = true;
            clearTimeout(timer);
            // A simple query of several statements answers one result each: the last is ours.
            const results: unknown = result;
            const last = (Array.isArray(results) ? results[results.length - 1] : result) as typeof result;
            resolve(last.rows);
            return;
          }
          if (isReadOnly(error)) {
            // The server turned read-only: drop the connection, so the next call reconnects
            // (to the writable host of a host list). Refused: nothing was written.
            serverReadOnly(client);
            client.release(error);
            sent = false;
            return fail(error);
          }
          if (sqlState(error) !== undefined && !isConnectionFailure(error)) {
            client.release();
            return fail(error);
          }
          client.release(error);
          if (/not queryable/i.test(error.message)) {
            sent = false; // refused before sending: the connection had died while idle
            if (attempt < 2) return checkout(++attempt);
          } else if (!write && attempt === 0) {
            return checkout(++attempt);
          }
          fail(error);
        });
      };
      const checkout = (n: number): void => {
        this.#pool.connect((error: Error | null | undefined, client: PoolClient | undefined) => {
          if (settled) {
            client?.release();
            return;
          }
          if (error || client === undefined) {
            // Nothing was sent yet: one more try on a fresh connection is safe.
            // With a host list, once per host (hosts.ts moves on to the next at each failure).
            if (n < connectRetries(this.#pool) && isConnectionFailure(error)) return checkout(++attempt);
            return fail(error ?? new Error('the pool gave no connection'));
          }
          if (!guarded.has(client)) {
            // node-postgres emits 'error' on a checked-out client whose server went away, where
            // a pool does not listen (a caller's pool too): unheard, it would end the process.
            // This call hears the same failure through its query's callback.
            client.on('error', ignore);
            guarded.add(client);
          }
          query(client);
        });
      };
      checkout(0);
    });
  }

  #timeout(operation: string, sent: boolean): LeaseTimeoutError {
    return new LeaseTimeoutError(`${operation}: no answer from ${this.#where} within ${this.#timeoutMs} ms`, {
      operation,
      outcomeUnknown: sent,
    });
  }
}
