/**
 * `PostgresPubSub`: a Mastra `PubSub` on PostgreSQL that is also its `LeaseProvider`.
 *
 * Events are rows of `<table>_events` (revision 0003 of sql_lease's migrations); an insert
 * trigger sends a NOTIFY with the topic, which one dedicated LISTEN connection per instance
 * receives; the instance then reads the new rows of that topic and pushes them to its
 * subscribers (delivery.ts). A periodic poll (and a full re-read after the listening
 * connection comes back) covers notifications lost while it was down.
 *
 * - Fan-out (no `group`): every subscriber gets every event published after `subscribe`
 *   resolved, in publish order per topic. `startFrom: 'earliest'`, `subscribeWithReplay` and
 *   `subscribeFromOffset` first replay the retained events (from an index), then go live.
 * - Consumer groups (`group`): competing consumers across all processes. Each event goes to
 *   one member, which must `ack` it; an event not acked within `ackTimeoutMs` (or nacked, or
 *   whose callback rejected) goes again to a member of the group, with `deliveryAttempt` + 1.
 *   The group's position is in the database, so events published while all its members are
 *   down wait for them (as long as they are retained). A new group starts at the oldest
 *   retained event (`startFrom: 'earliest'`, the default) or at the next one (`'latest'`).
 * - `localOnly` publishes (Mastra's run-local topics) never touch the database: they go to
 *   this instance's subscribers only.
 * - Retention: events older than `retentionMs` are deleted by `cleanup()`, which each instance
 *   runs every `cleanupIntervalMs`; `clearTopic` deletes a topic's events and groups at once.
 * - Leases: `PostgresLeaseProvider`'s on the same pool, with the handover of messages
 *   forwarded to a dead owner to the next run that takes the thread (thread-leases.ts).
 */

import { hostname } from 'node:os';
import { randomUUID } from 'node:crypto';

import type { Pool } from 'pg';
import { PubSub } from '@mastra/core/events';
import type { Event, EventCallback, LeaseProvider, PubSubDeliveryMode, SubscribeOptions } from '@mastra/core/events';

import { checkCallback, checkOffset, decode, describe, encode, type PublishedEvent } from './codec.js';
import { Delivery } from './delivery.js';
import { LeaseError, LeaseRangeError, LeaseTypeError } from './errors.js';
import { buildEventStatements, type EventStatements } from './events-sql.js';
import { Executor } from './execute.js';
import { storedTopic } from './keys.js';
import { Listener } from './listener.js';
import { PostgresLeaseProvider, type AcquireResult, type ConnectionOptions, type FencedAcquireResult } from './provider.js';
import { connect, listenConnection, settings, type Connection, type PubSubLogger, type PubSubOptions, type Settings } from './pubsub-options.js';
import { checkEventSchema } from './schema-check.js';
import { handoverStatements, ThreadLeases } from './thread-leases.js';
import { checkTopic } from './validate.js';

export { DEFAULT_RETENTION_MS, type PubSubLogger, type PubSubLoggerOption, type PubSubOptions } from './pubsub-options.js';

/** A Mastra PubSub on PostgreSQL tables, woken by LISTEN/NOTIFY, that also leases. */
export class PostgresPubSub extends PubSub implements LeaseProvider {
  /** The lease provider on the same pool (fences, `getLease()`, `now()`). */
  readonly leases: PostgresLeaseProvider;
  /** What `getLeaseProvider()` returns: `leases` plus the handover of forwarded messages. */
  readonly threadLeases: ThreadLeases;
  readonly #connection: Connection;
  readonly #settings: Settings;
  /** Rebuilt in place once the schema is resolved (`#qualify`); Delivery reads the same object. */
  readonly #sql: EventStatements;
  readonly #handover: ReturnType<typeof handoverStatements>;
  #qualified: Promise<void> | undefined;
  readonly #run: Executor;
  readonly #consumer = `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  readonly #logger: PubSubLogger;
  readonly #delivery: Delivery;
  /** Publishes in flight per topic (a thread's release waits for them: thread-leases.ts). */
  readonly #publishing = new Map<string, Set<Promise<void>>>();
  #listener: Listener | undefined;
  #starting: Promise<void> | undefined;
  #closed = false;

  /**
   * Events in the tables of `options.table` (default `leases`) in `options.schema`, on a pool
   * of its own for `connectionString` (ended by `close()`) or on the caller's `pool` (never
   * ended; one of its connections is held for LISTEN while the PubSub runs).
   */
  constructor(connection: ConnectionOptions, options: PubSubOptions = {}) {
    super();
    if (typeof connection !== 'object' || connection === null) {
      throw new LeaseTypeError('connection must be { connectionString } or { pool }');
    }
    const s = settings(options);
    this.#settings = s;
    this.#logger = s.logger;
    this.#connection = connect(connection, s);
    const pool: Pool = this.#connection.pool;
    this.leases = new PostgresLeaseProvider({ pool }, { table: s.table, schema: s.schema, timeoutMs: s.timeoutMs, pooler: s.pooler, logger: s.logger });
    this.#sql = buildEventStatements(s.table, s.schema, `${s.table}_alembic_version`);
    this.#handover = handoverStatements(s.table, s.schema, this.#sql);
    const where = this.#connection.where;
    this.#run = new Executor({ pool, timeoutMs: s.timeoutMs, where, table: this.#sql.qualified.events, pooler: s.pooler });
    this.#delivery = new Delivery({
      run: this.#run,
      sql: this.#sql,
      consumer: this.#consumer,
      batch: s.batch,
      ackTimeoutMs: s.ackTimeoutMs,
      maxDeliveryAttempts: s.maxDeliveryAttempts,
      nackDelayMs: s.nackDelayMs,
      logger: s.logger,
    });
    this.threadLeases = new ThreadLeases({
      leases: this.leases,
      run: this.#run,
      statements: this.#handover,
      prepare: () => this.#qualify(),
      published: (topic) => this.#published(topic),
      logger: s.logger,
    });
  }

  // -- capabilities -------------------------------------------------------------------------

  override get supportedModes(): ReadonlyArray<PubSubDeliveryMode> {
    return ['pull', 'push'];
  }

  override get supportsOffsets(): boolean {
    return true;
  }

  /** This instance's name in consumer groups' claims. */
  get consumerId(): string {
    return this.#consumer;
  }

  /** The LISTEN/NOTIFY channel of the event table. */
  get channel(): string {
    return this.#sql.names.channel;
  }

  // -- start-up ----------------------------------------------------------------------------

  /**
   * Check that the event tables exist (revision 0003 has run), start listening and the
   * timers. Called by the first publish or subscribe; call it at start-up to fail early.
   * Throws `LeaseSchemaError` (saying which command to run) when the migrations are missing.
   */
  ready(): Promise<void> {
    if (this.#closed) return Promise.reject(new LeaseError('the PostgresPubSub is closed'));
    this.#starting ??= this.#start().catch((error: unknown) => {
      this.#starting = undefined;
      throw error;
    });
    return this.#starting;
  }

  /** Qualify every statement with the schema (resolved once when not configured). */
  #qualify(): Promise<void> {
    const s = this.#settings;
    if (s.schema !== undefined) return Promise.resolve();
    this.#qualified ??= this.leases.resolvedSchema().then(
      (resolved) => {
        Object.assign(this.#sql, buildEventStatements(s.table, s.schema, `${s.table}_alembic_version`, resolved));
        Object.assign(this.#handover, handoverStatements(s.table, resolved, this.#sql));
      },
      (error: unknown) => {
        this.#qualified = undefined;
        throw error;
      },
    );
    return this.#qualified;
  }

  async #start(): Promise<void> {
    const s = this.#settings;
    await this.#qualify();
    await checkEventSchema({ run: this.#run, sql: this.#sql, table: s.table, schema: s.schema, where: this.#connection.where });
    if (s.pooler === 'transaction' && s.listenConnectionString === undefined) {
      // LISTEN needs a session of its own, which a transaction pooler never keeps.
      const info = this.#logger.info?.bind(this.#logger) ?? console.info;
      info(`[PostgresPubSub] behind a transaction pooler without listenConnectionString: reading subscribed topics every ${s.pollIntervalMs} ms, no LISTEN`);
    } else {
      const listener = new Listener({
        connect: () => listenConnection(this.#connection, this.#run.timeoutMs),
        channel: this.#sql.names.channel,
        onTopic: (topic) => this.#delivery.wake(topic),
        onResume: () => void this.#delivery.wakeAll(),
        onError: (error) => this.#logger.error('[PostgresPubSub] listening connection failed; reconnecting', describe(error)),
      });
      await listener.start();
      if (this.#closed) {
        await listener.close();
        throw new LeaseError('the PostgresPubSub is closed');
      }
      this.#listener = listener;
    }
    this.#delivery.every(s.pollIntervalMs, () => void this.#delivery.wakeAll());
    if (s.cleanupIntervalMs > 0) {
      this.#delivery.every(s.cleanupIntervalMs, () => {
        this.cleanup().catch((error: unknown) => this.#logger.error('[PostgresPubSub] cleanup failed', describe(error)));
      });
    }
  }

  // -- publishing ----------------------------------------------------------------------------

  /**
   * Store `event` on `topic` (it is delivered once the statement committed). With
   * `localOnly`, deliver it to this instance's subscribers only, without the database.
   * `data` is stored as JSON (a `Date` comes back as its ISO string).
   */
  publish(topic: string, event: PublishedEvent, options?: { localOnly?: boolean }): Promise<void> {
    const pass = this.#publish(topic, event, options);
    let pending = this.#publishing.get(topic);
    if (pending === undefined) this.#publishing.set(topic, (pending = new Set()));
    const set = pending;
    set.add(pass);
    const done = (): void => {
      set.delete(pass);
      if (set.size === 0 && this.#publishing.get(topic) === set) this.#publishing.delete(topic);
    };
    pass.then(done, done);
    return pass;
  }

  async #publish(topic: string, event: PublishedEvent, options?: { localOnly?: boolean }): Promise<void> {
    topic = checkTopic('topic', topic); // its stored form (keys.ts)
    const payload = encode(event);
    if (this.#closed) throw new LeaseError('the PostgresPubSub is closed');
    if (options?.localOnly === true) {
      this.#delivery.deliverLocal(topic, event);
      return;
    }
    await this.ready();
    await this.#run.run('publish', true, this.#sql.publish, [topic, payload]);
  }

  /** Resolves when the publishes to `topic` in flight now have settled. */
  async #published(topic: string): Promise<void> {
    const pending = this.#publishing.get(topic);
    if (pending !== undefined) await Promise.allSettled([...pending]);
  }

  // -- subscribing ---------------------------------------------------------------------------

  /** Deliver `topic`'s events to `cb`: see the module comment for groups and `startFrom`. */
  async subscribe(topic: string, cb: EventCallback, options?: SubscribeOptions): Promise<void> {
    topic = checkTopic('topic', topic); // its stored form (keys.ts)
    checkCallback(cb);
    const group = options?.group === undefined ? undefined : checkTopic('group', options.group);
    const startFrom = options?.startFrom;
    if (startFrom !== undefined && startFrom !== 'earliest' && startFrom !== 'latest') {
      throw new LeaseRangeError(`startFrom must be 'earliest' or 'latest', not ${JSON.stringify(startFrom)}`);
    }
    await this.ready();
    if (group !== undefined) {
      await this.#run.run('subscribe', true, this.#sql.joinGroup, [group, topic, startFrom === 'latest']);
      this.#delivery.addMember(topic, group, cb);
      return;
    }
    if (startFrom === 'earliest') return this.#replay(topic, 0, cb);
    const head = await this.#run.run('subscribe', false, this.#sql.head, [topic]);
    this.#delivery.addFanout(topic, cb, BigInt(head[0]?.[0] as string));
  }

  /** Replay the retained events of `topic`, then deliver the live ones. */
  override subscribeWithReplay(topic: string, cb: EventCallback): Promise<void> {
    return this.subscribeFromOffset(topic, 0, cb);
  }

  /** Replay the retained events of `topic` from index `offset` (0-based), then the live ones. */
  override async subscribeFromOffset(topic: string, offset: number, cb: EventCallback): Promise<void> {
    topic = checkTopic('topic', topic); // its stored form (keys.ts)
    checkCallback(cb);
    checkOffset(offset);
    await this.ready();
    await this.#replay(topic, offset, cb);
  }

  async #replay(topic: string, offset: number, cb: EventCallback): Promise<void> {
    const rows = await this.#run.run('subscribe', false, this.#sql.replay, [topic, String(offset)]);
    this.#delivery.replay(topic, rows, offset, cb);
  }

  /** The retained events of `topic` from index `offset` (0-based), oldest first. */
  override async getHistory(topic: string, offset = 0): Promise<Event[]> {
    topic = checkTopic('topic', topic); // its stored form (keys.ts)
    checkOffset(offset);
    await this.ready();
    const rows = await this.#run.run('getHistory', false, this.#sql.history, [topic, String(offset)]);
    return rows.map((row) => decode(row, 1));
  }

  /** Stop delivering `topic` to `cb` (in every group it joined on this topic too). */
  async unsubscribe(topic: string, cb: EventCallback): Promise<void> {
    this.#delivery.remove(typeof topic === 'string' && topic !== '' ? storedTopic(topic) : topic, cb);
  }

  /**
   * Delete everything retained for `topic`: its events, its groups and their claims.
   * Best-effort, as Mastra's contract asks: failures are logged, never thrown.
   */
  override async clearTopic(topic: string): Promise<void> {
    try {
      topic = checkTopic('topic', topic); // its stored form (keys.ts)
      await this.ready();
      await this.#run.run('clearTopic', true, this.#sql.clearTopic, [topic]);
    } catch (error) {
      this.#logger.error(`[PostgresPubSub] clearTopic failed for ${topic}`, describe(error));
    }
  }

  /**
   * Read every subscribed topic now and wait until the events found have been handed to the
   * callbacks and the promises the callbacks returned have settled. Delivery errors are
   * logged, not thrown (Mastra's contract).
   */
  async flush(): Promise<void> {
    if (this.#starting === undefined || this.#closed) return;
    await this.#starting.catch(() => undefined);
    await Promise.allSettled(this.#delivery.wakeAll());
    await this.#delivery.settle();
  }

  /**
   * Delete the events older than `retentionMs` (and their claims), then idle topic counters.
   * Each instance runs it every `cleanupIntervalMs`; safe to run anywhere, any time.
   */
  async cleanup(): Promise<{ events: number; topics: number }> {
    await this.ready();
    const retention = this.#settings.retentionMs;
    let events = 0;
    const batch = 1_000;
    for (;;) {
      const rows = await this.#run.run('cleanup', true, this.#sql.cleanupEvents, [retention, batch]);
      const n = Number(rows[0]?.[0] ?? 0);
      events += n;
      if (n < batch) break;
    }
    const rows = await this.#run.run('cleanup', true, this.#sql.cleanupTopics, [retention]);
    return { events, topics: Number(rows[0]?.[0] ?? 0) };
  }

  // -- leasing -------------------------------------------------------------------------------

  /** What Mastra's signals runtime asks first: `threadLeases`, on the same pool. */
  getLeaseProvider(): ThreadLeases {
    return this.threadLeases;
  }

  /** Exactly Mastra's `{ acquired, owner }` (a failure is logged with the key, then thrown). */
  acquireLease(key: string, owner: string, ttlMs: number): Promise<AcquireResult> {
    return this.threadLeases.acquireLease(key, owner, ttlMs);
  }

  /** `acquireLease` with the tenure's fence and expiry. */
  acquireFencedLease(key: string, owner: string, ttlMs: number): Promise<FencedAcquireResult> {
    return this.threadLeases.acquireFencedLease(key, owner, ttlMs);
  }

  getLeaseOwner(key: string): Promise<string | undefined> {
    return this.threadLeases.getLeaseOwner(key);
  }

  releaseLease(key: string, owner: string): Promise<void> {
    return this.threadLeases.releaseLease(key, owner);
  }

  renewLease(key: string, owner: string, ttlMs: number): Promise<boolean> {
    return this.threadLeases.renewLease(key, owner, ttlMs);
  }

  transferLease(key: string, fromOwner: string, toOwner: string, ttlMs: number): Promise<boolean> {
    return this.threadLeases.transferLease(key, fromOwner, toOwner, ttlMs);
  }

  // -- shutdown ------------------------------------------------------------------------------

  /**
   * Stop listening and delivering, wait for the reads in flight, and end the pool if this
   * PubSub created it (never a pool passed in). Unacked group events go to other members
   * after `ackTimeoutMs`. Idempotent.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const delivered = this.#delivery.close(); // stops the timers and the passes at once
    await this.#starting?.catch(() => undefined);
    await this.#listener?.close();
    await delivered;
    await this.leases.close();
    if (this.#connection.ownsPool) await this.#connection.pool.end();
  }
}
