/**
 * `PostgresPubSub`: a Mastra `PubSub` on PostgreSQL that is also its `LeaseProvider`.
 *
 * Events are rows of `<table>_events` (revision 0003 of sql_lease's migrations); an insert
 * trigger sends a NOTIFY with the topic, which one dedicated LISTEN connection per instance
 * receives; the instance then reads the new rows of that topic and pushes them to its
 * subscribers. A periodic poll (and a full re-read after the listening connection comes back)
 * covers notifications lost while it was down.
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
 * - Leases: the five `LeaseProvider` methods are `PostgresLeaseProvider`'s, on the same pool.
 */

import { hostname } from 'node:os';
import { randomUUID } from 'node:crypto';

import pg from 'pg';
import type { Pool } from 'pg';
import { PubSub } from '@mastra/core/events';
import type { Event, EventCallback, LeaseProvider, PubSubDeliveryMode, SubscribeOptions } from '@mastra/core/events';

import { catalogue } from './catalogue.js';
import { LeaseError, LeaseSchemaError, LeaseTypeError, LeaseRangeError } from './errors.js';
import { buildEventStatements, EVENTS_REVISION, type EventStatements } from './events-sql.js';
import { Executor, type Row } from './execute.js';
import { Listener } from './listener.js';
import {
  createPool,
  DEFAULT_TIMEOUT_MS,
  describeWhere,
  poolWhere,
  PostgresLeaseProvider,
  type AcquireResult,
  type ConnectionOptions,
  type ProviderOptions,
} from './provider.js';
import { checkIdentifier, checkMs, checkTimeout, checkTopic } from './validate.js';

export interface PubSubLogger {
  error(message: string, ...args: unknown[]): void;
}

export interface PubSubOptions extends ProviderOptions {
  /** How long events are kept, in ms (default one day). */
  retentionMs?: number | undefined;
  /** How often this instance runs `cleanup()`, in ms (default 5 minutes; 0: never). */
  cleanupIntervalMs?: number | undefined;
  /** How long a group member has to ack an event before it goes to another, in ms (default 30 s). */
  ackTimeoutMs?: number | undefined;
  /** How long a nacked event waits before it is delivered again, in ms (default 100). */
  nackDelayMs?: number | undefined;
  /** How often subscribed topics are read even without a notification, in ms (default 2 s). */
  pollIntervalMs?: number | undefined;
  /** Events read per statement (default 100). */
  batchSize?: number | undefined;
  /** Where delivery failures are reported (default `console`). */
  logger?: PubSubLogger | undefined;
}

export const DEFAULT_RETENTION_MS = 86_400_000;
const DEFAULTS = {
  cleanupIntervalMs: 300_000,
  ackTimeoutMs: 30_000,
  nackDelayMs: 100,
  pollIntervalMs: 2_000,
  batchSize: 100,
};

type PublishedEvent = Omit<Event, 'id' | 'createdAt'>;
type Ack = () => Promise<void>;
const NOOP_ACK: Ack = () => Promise.resolve();

interface FanoutSubscriber {
  cb: EventCallback;
  /** The id of the last event this subscriber was given (events are read after it). */
  cursor: bigint;
}

interface GroupState {
  members: EventCallback[];
  next: number;
  claiming: Promise<void> | undefined;
  again: boolean;
}

interface TopicState {
  topic: string;
  fanout: FanoutSubscriber[];
  groups: Map<string, GroupState>;
  fetching: Promise<void> | undefined;
  again: boolean;
}

/** A Mastra PubSub on PostgreSQL tables, woken by LISTEN/NOTIFY, that also leases. */
export class PostgresPubSub extends PubSub implements LeaseProvider {
  /** The lease provider on the same pool (also what `getLeaseProvider()` returns). */
  readonly leases: PostgresLeaseProvider;
  readonly #pool: Pool;
  readonly #ownsPool: boolean;
  readonly #connectionString: string | undefined;
  readonly #where: string;
  readonly #table: string;
  readonly #schema: string | undefined;
  readonly #sql: EventStatements;
  readonly #run: Executor;
  readonly #consumer = `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  readonly #retentionMs: number;
  readonly #cleanupIntervalMs: number;
  readonly #ackTimeoutMs: number;
  readonly #nackDelayMs: number;
  readonly #pollIntervalMs: number;
  readonly #batch: number;
  readonly #logger: PubSubLogger;
  readonly #topics = new Map<string, TopicState>();
  readonly #inFlight = new Set<Promise<unknown>>();
  readonly #timers = new Set<NodeJS.Timeout>();
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
    if (typeof options !== 'object' || options === null) throw new LeaseTypeError('options must be an object');
    const table = checkIdentifier('table', options.table ?? catalogue.naming.default_table);
    const schema = options.schema === undefined ? undefined : checkIdentifier('schema', options.schema);
    const timeoutMs = checkTimeout('timeoutMs', options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    this.#retentionMs = checkMs('retentionMs', options.retentionMs ?? DEFAULT_RETENTION_MS);
    this.#cleanupIntervalMs = checkMs('cleanupIntervalMs', options.cleanupIntervalMs ?? DEFAULTS.cleanupIntervalMs, 0);
    this.#ackTimeoutMs = checkMs('ackTimeoutMs', options.ackTimeoutMs ?? DEFAULTS.ackTimeoutMs);
    this.#nackDelayMs = checkMs('nackDelayMs', options.nackDelayMs ?? DEFAULTS.nackDelayMs, 0);
    this.#pollIntervalMs = checkMs('pollIntervalMs', options.pollIntervalMs ?? DEFAULTS.pollIntervalMs, 10);
    const batch = options.batchSize ?? DEFAULTS.batchSize;
    if (!Number.isInteger(batch) || batch < 1 || batch > 10_000) {
      throw new LeaseRangeError(`batchSize must be an integer from 1 to 10000, not ${String(batch)}`);
    }
    this.#batch = batch;
    const logger = options.logger ?? console;
    if (typeof logger.error !== 'function') throw new LeaseTypeError('logger must have an error() method');
    this.#logger = logger;
    const max = options.maxConnections ?? 10;
    if (!Number.isInteger(max) || max < 1) throw new LeaseTypeError('maxConnections must be a positive integer');
    if ('pool' in connection) {
      const pool = connection.pool as unknown;
      if (typeof pool !== 'object' || pool === null || typeof (pool as Pool).connect !== 'function') {
        throw new LeaseTypeError('pool must be a node-postgres Pool');
      }
      this.#pool = connection.pool;
      this.#ownsPool = false;
      this.#connectionString = undefined;
      this.#where = poolWhere(connection.pool);
    } else if (typeof (connection as { connectionString?: unknown }).connectionString === 'string') {
      this.#pool = createPool(connection.connectionString, timeoutMs, max);
      this.#ownsPool = true;
      this.#connectionString = connection.connectionString;
      this.#where = describeWhere(connection.connectionString);
    } else {
      throw new LeaseTypeError('connection must be { connectionString: string } or { pool }');
    }
    this.#table = table;
    this.#schema = schema;
    this.leases = new PostgresLeaseProvider({ pool: this.#pool }, { table, schema, timeoutMs });
    this.#sql = buildEventStatements(table, schema, `${table}_alembic_version`);
    this.#run = new Executor({ pool: this.#pool, timeoutMs, where: this.#where, table: this.#sql.qualified.events });
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

  async #start(): Promise<void> {
    await this.#checkSchema();
    const listener = new Listener({
      connect: () => this.#connectListener(),
      channel: this.#sql.names.channel,
      onTopic: (topic) => this.#wake(topic),
      onResume: () => this.#wakeAll(),
      onError: (error) => this.#logger.error('[PostgresPubSub] listening connection failed; reconnecting', describe(error)),
    });
    await listener.start();
    if (this.#closed) {
      await listener.close();
      throw new LeaseError('the PostgresPubSub is closed');
    }
    this.#listener = listener;
    this.#every(this.#pollIntervalMs, () => this.#wakeAll());
    if (this.#cleanupIntervalMs > 0) {
      this.#every(this.#cleanupIntervalMs, () => {
        this.cleanup().catch((error: unknown) => this.#logger.error('[PostgresPubSub] cleanup failed', describe(error)));
      });
    }
  }

  async #connectListener(): Promise<pg.Client | pg.PoolClient> {
    if (this.#connectionString === undefined) return this.#pool.connect();
    const client = new pg.Client({
      connectionString: this.#connectionString,
      application_name: 'sql_lease_mastra_listen',
      connectionTimeoutMillis: Math.ceil(this.#run.timeoutMs),
      keepAlive: true,
    });
    client.on('error', () => undefined); // reported through the listener's own handler
    await client.connect();
    return client;
  }

  async #checkSchema(): Promise<void> {
    let rows: Row[];
    try {
      rows = await this.#run.run('ready', false, this.#sql.probe, []);
    } catch (error) {
      if (!(error instanceof LeaseSchemaError)) throw error;
      throw await this.#schemaError('are missing or out of date', error);
    }
    if (Number(rows[0]?.[1]) !== 1) throw await this.#schemaError('lack their insert trigger');
  }

  async #schemaError(problem: string, cause?: LeaseSchemaError): Promise<LeaseSchemaError> {
    let at = 'has no sql_lease migrations for this table';
    try {
      const rows = await this.#run.run('ready', false, this.#sql.version, []);
      if (rows[0] !== undefined) at = `is at revision ${String(rows[0][0])}`;
    } catch {
      // no version table: nothing migrated
    }
    const flags = [
      this.#table === catalogue.naming.default_table ? '' : ` --table ${this.#table}`,
      this.#schema === undefined ? '' : ` --schema ${this.#schema}`,
    ].join('');
    return new LeaseSchemaError(
      `ready: the event tables of ${this.#sql.qualified.events} ${problem} in ${this.#where}, which ${at}; ` +
        `PostgresPubSub needs revision ${EVENTS_REVISION} of sql_lease's migrations: run ` +
        `\`sql-lease migrate --url ...${flags}\` (pip install "sql-lease[cli]") or \`alembic upgrade head\``,
      { operation: 'ready', sqlState: cause?.sqlState, cause },
    );
  }

  // -- publishing ----------------------------------------------------------------------------

  /**
   * Store `event` on `topic` (it is delivered once the statement committed). With
   * `localOnly`, deliver it to this instance's subscribers only, without the database.
   * `data` is stored as JSON (a `Date` comes back as its ISO string).
   */
  async publish(topic: string, event: PublishedEvent, options?: { localOnly?: boolean }): Promise<void> {
    checkTopic('topic', topic);
    const payload = encode(event);
    if (this.#closed) throw new LeaseError('the PostgresPubSub is closed');
    if (options?.localOnly === true) {
      this.#deliverLocal(topic, event);
      return;
    }
    await this.ready();
    await this.#run.run('publish', true, this.#sql.publish, [topic, payload]);
  }

  // -- subscribing ---------------------------------------------------------------------------

  /** Deliver `topic`'s events to `cb`: see the module comment for groups and `startFrom`. */
  async subscribe(topic: string, cb: EventCallback, options?: SubscribeOptions): Promise<void> {
    checkTopic('topic', topic);
    checkCallback(cb);
    const group = options?.group;
    if (group !== undefined) checkTopic('group', group);
    const startFrom = options?.startFrom;
    if (startFrom !== undefined && startFrom !== 'earliest' && startFrom !== 'latest') {
      throw new LeaseRangeError(`startFrom must be 'earliest' or 'latest', not ${JSON.stringify(startFrom)}`);
    }
    await this.ready();
    if (group !== undefined) {
      await this.#run.run('subscribe', true, this.#sql.joinGroup, [group, topic, startFrom === 'latest']);
      const state = this.#state(topic);
      let members = state.groups.get(group);
      if (members === undefined) {
        members = { members: [], next: 0, claiming: undefined, again: false };
        state.groups.set(group, members);
      }
      members.members.push(cb);
      void this.#claim(state, group);
      return;
    }
    if (startFrom === 'earliest') return this.#replay(topic, 0, cb);
    const head = await this.#run.run('subscribe', false, this.#sql.head, [topic]);
    const state = this.#state(topic);
    state.fanout.push({ cb, cursor: BigInt(head[0]?.[0] as string) });
    void this.#fetch(state);
  }

  /** Replay the retained events of `topic`, then deliver the live ones. */
  override subscribeWithReplay(topic: string, cb: EventCallback): Promise<void> {
    return this.subscribeFromOffset(topic, 0, cb);
  }

  /** Replay the retained events of `topic` from index `offset` (0-based), then the live ones. */
  override async subscribeFromOffset(topic: string, offset: number, cb: EventCallback): Promise<void> {
    checkTopic('topic', topic);
    checkCallback(cb);
    checkOffset(offset);
    await this.ready();
    await this.#replay(topic, offset, cb);
  }

  async #replay(topic: string, offset: number, cb: EventCallback): Promise<void> {
    const rows = await this.#run.run('subscribe', false, this.#sql.replay, [topic, String(offset)]);
    let cursor = 0n;
    const state = this.#state(topic);
    for (const row of rows) {
      const event = decode(row, 1);
      cursor = BigInt(row[0] as string);
      if (Number(row[1]) >= offset) this.#deliver(topic, cb, event, NOOP_ACK, NOOP_ACK, false);
    }
    state.fanout.push({ cb, cursor });
    void this.#fetch(state);
  }

  /** The retained events of `topic` from index `offset` (0-based), oldest first. */
  override async getHistory(topic: string, offset = 0): Promise<Event[]> {
    checkTopic('topic', topic);
    checkOffset(offset);
    await this.ready();
    const rows = await this.#run.run('getHistory', false, this.#sql.history, [topic, String(offset)]);
    return rows.map((row) => decode(row, 1));
  }

  /** Stop delivering `topic` to `cb` (in every group it joined on this topic too). */
  async unsubscribe(topic: string, cb: EventCallback): Promise<void> {
    const state = this.#topics.get(topic);
    if (state === undefined) return;
    state.fanout = state.fanout.filter((s) => s.cb !== cb);
    for (const [group, members] of state.groups) {
      members.members = members.members.filter((m) => m !== cb);
      if (members.members.length === 0) state.groups.delete(group);
    }
    if (state.fanout.length === 0 && state.groups.size === 0) this.#topics.delete(topic);
  }

  /**
   * Delete everything retained for `topic`: its events, its groups and their claims.
   * Best-effort, as Mastra's contract asks: failures are logged, never thrown.
   */
  override async clearTopic(topic: string): Promise<void> {
    try {
      checkTopic('topic', topic);
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
    await Promise.allSettled(this.#wakeAll());
    for (let round = 0; round < 10 && this.#inFlight.size > 0; round++) {
      await Promise.allSettled([...this.#inFlight]);
    }
  }

  /**
   * Delete the events older than `retentionMs` (and their claims), then idle topic counters.
   * Each instance runs it every `cleanupIntervalMs`; safe to run anywhere, any time.
   */
  async cleanup(): Promise<{ events: number; topics: number }> {
    await this.ready();
    let events = 0;
    const batch = 1_000;
    for (;;) {
      const rows = await this.#run.run('cleanup', true, this.#sql.cleanupEvents, [this.#retentionMs, batch]);
      const n = Number(rows[0]?.[0] ?? 0);
      events += n;
      if (n < batch) break;
    }
    const rows = await this.#run.run('cleanup', true, this.#sql.cleanupTopics, [this.#retentionMs]);
    const topics = Number(rows[0]?.[0] ?? 0);
    return { events, topics };
  }

  // -- delivery ------------------------------------------------------------------------------

  #state(topic: string): TopicState {
    let state = this.#topics.get(topic);
    if (state === undefined) {
      state = { topic, fanout: [], groups: new Map(), fetching: undefined, again: false };
      this.#topics.set(topic, state);
    }
    return state;
  }

  #wake(topic: string): void {
    const state = this.#topics.get(topic);
    if (state === undefined) return;
    void this.#fetch(state);
    for (const group of state.groups.keys()) void this.#claim(state, group);
  }

  #wakeAll(): Promise<void>[] {
    const passes: Promise<void>[] = [];
    for (const state of this.#topics.values()) {
      passes.push(this.#fetch(state));
      for (const group of state.groups.keys()) passes.push(this.#claim(state, group));
    }
    return passes;
  }

  /** Read the topic's new events for its fan-out subscribers; one pass at a time per topic. */
  #fetch(state: TopicState): Promise<void> {
    if (state.fetching !== undefined) {
      state.again = true;
      return state.fetching;
    }
    const pass = this.#track(this.#fetchLoop(state)).finally(() => {
      state.fetching = undefined;
    });
    state.fetching = pass;
    return pass;
  }

  async #fetchLoop(state: TopicState): Promise<void> {
    try {
      do {
        state.again = false;
        for (;;) {
          if (this.#closed || state.fanout.length === 0) return;
          let from = state.fanout[0]!.cursor;
          for (const s of state.fanout) if (s.cursor < from) from = s.cursor;
          const rows = await this.#run.run('deliver', false, this.#sql.fetch, [state.topic, String(from), this.#batch]);
          for (const row of rows) {
            const id = BigInt(row[0] as string);
            const event = decode(row, 1);
            for (const s of [...state.fanout]) {
              if (s.cursor >= id) continue;
              s.cursor = id;
              this.#deliver(state.topic, s.cb, event, NOOP_ACK, NOOP_ACK, false);
            }
          }
          if (rows.length < this.#batch) break;
        }
      } while (state.again);
    } catch (error) {
      // The next notification or poll tries again from the same cursors.
      if (!this.#closed) this.#logger.error(`[PostgresPubSub] reading ${state.topic} failed`, describe(error));
    }
  }

  /** Claim the group's next and due events for this instance; one pass at a time per group. */
  #claim(state: TopicState, group: string): Promise<void> {
    const members = state.groups.get(group);
    if (members === undefined) return Promise.resolve();
    if (members.claiming !== undefined) {
      members.again = true;
      return members.claiming;
    }
    const pass = this.#track(this.#claimLoop(state, group, members)).finally(() => {
      members.claiming = undefined;
    });
    members.claiming = pass;
    return pass;
  }

  async #claimLoop(state: TopicState, group: string, members: GroupState): Promise<void> {
    try {
      do {
        members.again = false;
        for (;;) {
          if (this.#closed || members.members.length === 0) return;
          const rows = await this.#run.run('deliver', true, this.#sql.claim, [
            group,
            state.topic,
            this.#consumer,
            this.#batch,
            this.#ackTimeoutMs,
          ]);
          for (const row of rows) {
            const id = row[0] as string;
            const event = decode(row, Number(row[4]));
            const member = this.#pick(members);
            if (member === undefined) break; // unsubscribed meanwhile: the claims expire to others
            const { ack, nack } = this.#settlers(state, group, id);
            this.#deliver(state.topic, member, event, ack, nack, true);
          }
          if (rows.length < this.#batch) break;
        }
      } while (members.again);
    } catch (error) {
      if (!this.#closed) this.#logger.error(`[PostgresPubSub] claiming ${state.topic} for ${group} failed`, describe(error));
    }
  }

  #pick(members: GroupState): EventCallback | undefined {
    if (members.members.length === 0) return undefined;
    const member = members.members[members.next % members.members.length];
    members.next++;
    return member;
  }

  /** The ack and nack of one claimed event: each acts once, only while this instance holds it. */
  #settlers(state: TopicState, group: string, id: string): { ack: Ack; nack: Ack } {
    let settled: Promise<void> | undefined;
    const ack: Ack = () => {
      settled ??= this.#run
        .run('ack', true, this.#sql.ack, [group, state.topic, id, this.#consumer])
        .then(() => undefined);
      return settled;
    };
    const nack: Ack = () => {
      settled ??= this.#run
        .run('nack', true, this.#sql.nack, [group, state.topic, id, this.#consumer, this.#nackDelayMs])
        .then(() => this.#after(this.#nackDelayMs, () => void this.#claim(state, group)));
      return settled;
    };
    return { ack, nack };
  }

  /** Run `cb` without awaiting it (Mastra's contract); a rejection nacks a group delivery. */
  #deliver(topic: string, cb: EventCallback, event: Event, ack: Ack, nack: Ack, grouped: boolean): void {
    const failed = (error: unknown): void => {
      this.#logger.error(`[PostgresPubSub] subscriber failed for ${topic}`, error);
      if (grouped) {
        nack().catch((e: unknown) => this.#logger.error(`[PostgresPubSub] nack failed for ${topic}`, describe(e)));
      }
    };
    let result: unknown;
    try {
      result = cb(event, ack, nack);
    } catch (error) {
      failed(error);
      return;
    }
    if (result instanceof Promise) this.#track(result.then(undefined, failed));
  }

  /** A process-local event: to every local fan-out subscriber and one member of each group. */
  #deliverLocal(topic: string, published: PublishedEvent): void {
    const state = this.#topics.get(topic);
    if (state === undefined) return;
    const event: Event = { ...published, id: `local:${randomUUID()}`, createdAt: new Date(), deliveryAttempt: 1 };
    for (const s of [...state.fanout]) this.#deliver(topic, s.cb, event, NOOP_ACK, NOOP_ACK, false);
    for (const members of state.groups.values()) this.#deliverLocalToGroup(topic, members, event);
  }

  #deliverLocalToGroup(topic: string, members: GroupState, event: Event): void {
    const member = this.#pick(members);
    if (member === undefined) return;
    let settled = false;
    const nack: Ack = () => {
      if (!settled) {
        settled = true;
        const again = { ...event, deliveryAttempt: (event.deliveryAttempt ?? 1) + 1 };
        this.#after(this.#nackDelayMs, () => this.#deliverLocalToGroup(topic, members, again));
      }
      return Promise.resolve();
    };
    const ack: Ack = () => {
      settled = true;
      return Promise.resolve();
    };
    this.#deliver(topic, member, event, ack, nack, true);
  }

  #track<T>(promise: Promise<T>): Promise<T> {
    this.#inFlight.add(promise);
    promise.then(
      () => this.#inFlight.delete(promise),
      () => this.#inFlight.delete(promise),
    );
    return promise;
  }

  #after(ms: number, fn: () => void): void {
    if (this.#closed) return;
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      if (!this.#closed) fn();
    }, ms);
    timer.unref();
    this.#timers.add(timer);
  }

  #every(ms: number, fn: () => void): void {
    const timer = setInterval(() => {
      if (!this.#closed) fn();
    }, ms);
    timer.unref();
    this.#timers.add(timer);
  }

  // -- leasing -------------------------------------------------------------------------------

  /** What Mastra's signals runtime asks first: the lease provider on the same pool. */
  getLeaseProvider(): PostgresLeaseProvider {
    return this.leases;
  }

  acquireLease(key: string, owner: string, ttlMs: number): Promise<AcquireResult> {
    return this.leases.acquireLease(key, owner, ttlMs);
  }

  getLeaseOwner(key: string): Promise<string | undefined> {
    return this.leases.getLeaseOwner(key);
  }

  releaseLease(key: string, owner: string): Promise<void> {
    return this.leases.releaseLease(key, owner);
  }

  renewLease(key: string, owner: string, ttlMs: number): Promise<boolean> {
    return this.leases.renewLease(key, owner, ttlMs);
  }

  transferLease(key: string, fromOwner: string, toOwner: string, ttlMs: number): Promise<boolean> {
    return this.leases.transferLease(key, fromOwner, toOwner, ttlMs);
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
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers.clear();
    await this.#starting?.catch(() => undefined);
    await this.#listener?.close();
    await Promise.allSettled([...this.#inFlight]);
    this.#topics.clear();
    await this.leases.close();
    if (this.#ownsPool) await this.#pool.end();
  }
}

function checkCallback(cb: unknown): void {
  if (typeof cb !== 'function') throw new LeaseTypeError('cb must be a function');
}

function checkOffset(offset: unknown): void {
  if (typeof offset !== 'number' || !Number.isInteger(offset)) {
    throw new LeaseTypeError(`offset must be an integer, not ${String(offset)}`);
  }
  if (offset < 0) throw new LeaseRangeError(`offset must be 0 or more, not ${offset}`);
}

/** The stored form of an event: everything but the fields the PubSub assigns, as JSON. */
function encode(event: PublishedEvent): string {
  if (typeof event !== 'object' || event === null || typeof event.type !== 'string') {
    throw new LeaseTypeError('event must be an object with a string type');
  }
  const { id: _id, createdAt: _createdAt, deliveryAttempt: _attempt, ...rest } = event as Partial<Event>;
  let text: string | undefined;
  try {
    text = JSON.stringify(rest);
  } catch (error) {
    throw new LeaseTypeError(`event is not JSON-serialisable: ${error instanceof Error ? error.message : String(error)}`);
  }
  if (text === undefined) throw new LeaseTypeError('event is not JSON-serialisable');
  return text;
}

/** An event from a row `[id, seq, payload, created_at, ...]`. */
function decode(row: Row, deliveryAttempt: number): Event {
  const stored = JSON.parse(row[2] as string) as Omit<Event, 'id' | 'createdAt'>;
  return {
    ...stored,
    id: String(row[0]),
    createdAt: row[3] as Date,
    index: stored.index ?? Number(row[1]),
    deliveryAttempt,
  };
}

function describe(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}
