/**
 * The lease provider `PostgresPubSub` gives Mastra's signals runtime: `PostgresLeaseProvider`'s
 * five methods, plus the handover of messages forwarded to an owner that died.
 *
 * How Mastra 1.71 forwards (agent/thread-stream runtime): a run that loses `acquireLease` on a
 * thread key publishes `{ type: 'signal-enqueued', runId: <holder>, data: { type, runId:
 * <holder>, signal, sourceId } }` on the thread's topic `agent.thread-stream.<encoded key>`;
 * the holder's process queues it for its run only when `data.runId` is a run it owns, and only
 * when `data.sourceId` is not its own. A run that ends publishes `run-completed` (or
 * `run-failed`, `run-aborted`, `run-discarded`) on that topic before it releases or transfers
 * its lease. So when the holder dies, its forwarded messages stay in the table addressed to a
 * run nobody owns, and the next run that takes the thread ignores them.
 *
 * Here, when an acquire wins a thread key from another owner (read just before), and that
 * owner's run never published a terminal event on the thread's topic (it died), the forwarded
 * messages whose last addressee is that owner are published again, addressed to the new owner,
 * before the acquire returns (so they are stored before the new run starts; its process
 * subscribed to the topic before acquiring). Those re-addressed to an owner that dies in turn
 * move on to the next one the same way. A message the dead run had already taken in is
 * delivered again (the same signal id): at least once, never lost while retained.
 *
 * The order this relies on: this instance's publishes to a thread's topic commit before its
 * release or transfer of that thread's lease (the runtime publishes the terminal event first,
 * without awaiting it), so a run that ended normally is never mistaken for a dead one.
 */

import type { LeaseProvider } from '@mastra/core/events';

import { quoteIdent } from './catalogue.js';
import { describe } from './codec.js';
import { OP, type EventStatements } from './events-sql.js';
import type { Executor, Row } from './execute.js';
import { fromWtf8, storedTopic } from './keys.js';
import { showKey, type AcquireResult, type FencedAcquireResult, type PostgresLeaseProvider } from './provider.js';
import type { PubSubLogger } from './pubsub-options.js';
import { checkKey, checkName, checkTtl } from './validate.js';

/** Mastra's thread topics (`AGENT_THREAD_STREAM_TOPIC_PREFIX`, not exported by @mastra/core). */
export const THREAD_TOPIC_PREFIX = 'agent.thread-stream';
/** The run-ending event types of Mastra's thread topics. */
export const TERMINAL_TYPES = ['run-completed', 'run-failed', 'run-aborted', 'run-discarded'] as const;
/** The `sourceId` of re-addressed messages: never a process's own, so its owner admits them. */
export const REDELIVERY_SOURCE = 'sql_lease:redelivered';

/** The topic Mastra's runtime uses for the thread of lease key `key` (`resourceId\0threadId`). */
export function threadTopic(key: string): string {
  return `${THREAD_TOPIC_PREFIX}.${encodeURIComponent(key)}`;
}

/** The statements of the handover, for one leases table and its event tables. */
export function handoverStatements(leasesTable: string, schema: string | undefined, events: EventStatements): {
  previousOwner: string;
  redeliver: string;
} {
  const leases = (schema === undefined ? '' : `${quoteIdent(schema)}.`) + quoteIdent(leasesTable);
  const ev = events.qualified.events;
  const { eq } = OP;
  const [get, getText, cat] = ['OPERATOR(pg_catalog.->)', 'OPERATOR(pg_catalog.->>)', 'OPERATOR(pg_catalog.||)'];
  const text = '::pg_catalog.text';
  const terminal = `ANY (ARRAY[${TERMINAL_TYPES.map((t) => `'${t}'`).join(', ')}]::pg_catalog.text[])`;
  const signalId = `COALESCE(((e.payload ${get} 'data') ${get} 'signal') ${getText} 'id', e.id${text})`;
  // PostgreSQL cannot take a JSON string holding a lone surrogate (\\ud800, as JSON.stringify
  // writes it) apart: such events are passed over, each tested before it is looked into.
  const plain = (alias: string): string =>
    `NOT (${alias}.payload${text} OPERATOR(pg_catalog.~) E'\\\\\\\\u[dD][89abAB]')`;
  const endOf = (alias: string): string =>
    `CASE WHEN ${plain(alias)} THEN (${alias}.payload ${getText} 'runId') ${eq} $2${text} AND ` +
    `(${alias}.payload ${getText} 'type') ${eq} ${terminal} ELSE false END`;
  return {
    // $1 key → the row's owner, live or not (the tenure an acquire is about to replace).
    previousOwner: `SELECT owner FROM ${leases} WHERE key ${eq} $1::pg_catalog.bytea`,
    // $1 topic, $2 the previous owner, $3 the new owner → the re-addressed events' ids. Does
    // nothing (the scan is skipped) when $2's run published a terminal event on the topic.
    // A run's end is among the newest events of its topic (it is published right before the
    // release): those are looked at first, newest first, and the rest only if it is not there.
    // Every object is named in full (see events-sql.ts).
    redeliver: `WITH ended AS (
  (SELECT 1 FROM (SELECT e.payload FROM ${ev} AS e WHERE e.topic ${eq} $1${text} ORDER BY e.id DESC LIMIT 256) AS recent
   WHERE ${endOf('recent')})
  UNION ALL
  (SELECT 1 FROM ${ev} AS e WHERE e.topic ${eq} $1${text} AND ${endOf('e')})
  LIMIT 1
), latest AS (
  SELECT DISTINCT ON (${signalId}) e.id, e.payload::pg_catalog.jsonb AS p FROM ${ev} AS e
  WHERE e.topic ${eq} $1${text} AND NOT EXISTS (SELECT FROM ended)
    AND CASE WHEN ${plain('e')} THEN (e.payload ${getText} 'type') ${eq} 'signal-enqueued' ELSE false END
  ORDER BY ${signalId}, e.id DESC
)
INSERT INTO ${ev} (topic, payload)
SELECT $1${text}, (pg_catalog.jsonb_set(p, '{runId}', pg_catalog.to_jsonb($3${text})) ${cat} pg_catalog.jsonb_build_object('data', (p ${get} 'data') ${cat}
  pg_catalog.jsonb_build_object('runId', $3${text}, 'sourceId', '${REDELIVERY_SOURCE}'${text}, 'preRun', false)))::pg_catalog.json
FROM latest WHERE ((p ${get} 'data') ${getText} 'runId') ${eq} $2${text} ORDER BY id
RETURNING id`,
  };
}

export interface ThreadLeasesOptions {
  leases: PostgresLeaseProvider;
  run: Executor;
  statements: ReturnType<typeof handoverStatements>;
  /** Resolves when `statements` name their relations in full (the schema resolved). */
  prepare: () => Promise<void>;
  /** Resolves when this instance's publishes to `topic` that started before the call settled. */
  published: (topic: string) => Promise<void>;
  logger: PubSubLogger;
}

/** Mastra's `LeaseProvider` with the handover of forwarded messages (see the module comment). */
export class ThreadLeases implements LeaseProvider {
  readonly #o: ThreadLeasesOptions;
  /** Forwarded messages re-addressed to a new owner so far (diagnostics). */
  redelivered = 0;

  constructor(options: ThreadLeasesOptions) {
    this.#o = options;
  }

  /** Mastra's `{ acquired, owner }`; a failure is logged with the key (the provider's logger). */
  acquireLease(key: string, owner: string, ttlMs: number): Promise<AcquireResult> {
    return this.#acquire(key, owner, ttlMs, (...args) => this.#o.leases.acquireLease(...args));
  }

  /** `acquireLease` with the tenure's fence and expiry (see `PostgresLeaseProvider`). */
  acquireFencedLease(key: string, owner: string, ttlMs: number): Promise<FencedAcquireResult> {
    return this.#acquire(key, owner, ttlMs, (...args) => this.#o.leases.acquireFencedLease(...args));
  }

  /** The acquire (`acquire`: the provider's, plain or fenced), with the handover of a thread key. */
  async #acquire<R extends AcquireResult>(
    key: string,
    owner: string,
    ttlMs: number,
    acquire: (key: string, owner: string, ttlMs: number) => Promise<R>,
  ): Promise<R> {
    const { leases, run, statements } = this.#o;
    if (typeof key !== 'string' || !key.includes('\0') || leases.closed) return acquire(key, owner, ttlMs); // not a thread key
    let row: Row | undefined;
    try {
      const k = checkKey(key);
      checkName('owner', owner);
      checkTtl('ttlMs', ttlMs);
      await this.#o.prepare();
      row = (await run.run('acquireLease', false, statements.previousOwner, [k]))[0];
    } catch (error) {
      this.#o.logger.error(`[PostgresPubSub] acquireLease failed for key ${showKey(key)}: ${String(error)}`);
      throw error;
    }
    const result = await acquire(key, owner, ttlMs);
    // The previous owner as text; one another tool wrote as non-text bytes has no messages here.
    const previous = row === undefined ? undefined : fromWtf8(row[0] as Buffer);
    if (result.acquired && previous !== undefined && previous !== owner) await this.#redeliver(key, previous, owner);
    return result;
  }

  async #redeliver(key: string, previous: string, owner: string): Promise<void> {
    const topic = storedTopic(threadTopic(key));
    try {
      const rows = await this.#o.run.run('acquireLease', true, this.#o.statements.redeliver, [topic, previous, owner]);
      this.redelivered += rows.length;
    } catch (error) {
      // The lease is won either way; the messages stay addressed to the dead owner.
      this.#o.logger.error(`[PostgresPubSub] handing the messages of ${previous} on ${topic} to ${owner} failed`, describe(error));
    }
  }

  getLeaseOwner(key: string): Promise<string | undefined> {
    return this.#o.leases.getLeaseOwner(key);
  }

  async releaseLease(key: string, owner: string): Promise<void> {
    checkKey(key);
    checkName('owner', owner);
    await this.#o.published(threadTopic(key));
    await this.#o.leases.releaseLease(key, owner);
  }

  renewLease(key: string, owner: string, ttlMs: number): Promise<boolean> {
    return this.#o.leases.renewLease(key, owner, ttlMs);
  }

  async transferLease(key: string, fromOwner: string, toOwner: string, ttlMs: number): Promise<boolean> {
    checkKey(key);
    checkName('fromOwner', fromOwner);
    checkName('toOwner', toOwner);
    checkTtl('ttlMs', ttlMs);
    await this.#o.published(threadTopic(key));
    return this.#o.leases.transferLease(key, fromOwner, toOwner, ttlMs);
  }
}
