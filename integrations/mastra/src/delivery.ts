/**
 * Push delivery of stored events to this instance's subscribers.
 *
 * - Fan-out subscribers each keep a cursor (the id of the last event they were given); one read
 *   pass at a time per topic reads the events after the smallest cursor and hands each event to
 *   every subscriber it is new to, in id order (which is publish order per topic, see
 *   events-sql.ts).
 * - Consumer groups: one claim pass at a time per group takes the group's next and due events
 *   for this instance (one statement, see `claim` in events-sql.ts) and hands each to one local
 *   member, round robin, with an `ack` and a `nack` that act once, only while the claim is ours.
 * - Callbacks are not awaited (Mastra's contract); their promises are tracked so that `settle()`
 *   can wait for them. A callback that throws or rejects nacks a group delivery.
 * - Read failures are logged: the next notification or poll tries again from the same cursors.
 */

import { randomUUID } from 'node:crypto';

import type { Event, EventCallback } from '@mastra/core/events';

import { decode, describe, type PublishedEvent } from './codec.js';
import type { EventStatements } from './events-sql.js';
import type { Executor, Row } from './execute.js';
import type { PubSubLogger } from './pubsub-options.js';

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

export interface DeliveryOptions {
  run: Executor;
  sql: EventStatements;
  /** This instance's name in consumer groups' claims. */
  consumer: string;
  batch: number;
  ackTimeoutMs: number;
  nackDelayMs: number;
  /** Deliveries of a group event before it is parked (`MAX_ATTEMPTS_OFF`: never). */
  maxDeliveryAttempts: number;
  logger: PubSubLogger;
}

export class Delivery {
  readonly #o: DeliveryOptions;
  readonly #topics = new Map<string, TopicState>();
  readonly #inFlight = new Set<Promise<unknown>>();
  readonly #timers = new Set<NodeJS.Timeout>();
  #closed = false;

  constructor(options: DeliveryOptions) {
    this.#o = options;
  }

  /** Deliver `topic`'s events after id `cursor` to `cb`. */
  addFanout(topic: string, cb: EventCallback, cursor: bigint): void {
    const state = this.#state(topic);
    state.fanout.push({ cb, cursor });
    void this.#fetch(state);
  }

  /** Hand `cb` the replayed rows whose index is `offset` or more, then the live events after them. */
  replay(topic: string, rows: Row[], offset: number, cb: EventCallback): void {
    let cursor = 0n;
    for (const row of rows) {
      cursor = BigInt(row[0] as string);
      if (Number(row[1]) >= offset) this.#deliver(topic, cb, decode(row, 1), NOOP_ACK, NOOP_ACK, false);
    }
    this.addFanout(topic, cb, cursor);
  }

  /** Make `cb` a local member of `group` on `topic` (the group exists in the database). */
  addMember(topic: string, group: string, cb: EventCallback): void {
    const state = this.#state(topic);
    let members = state.groups.get(group);
    if (members === undefined) {
      members = { members: [], next: 0, claiming: undefined, again: false };
      state.groups.set(group, members);
    }
    members.members.push(cb);
    void this.#claim(state, group);
  }

  /** Stop delivering `topic` to `cb` (in every group it joined on this topic too). */
  remove(topic: string, cb: EventCallback): void {
    const state = this.#topics.get(topic);
    if (state === undefined) return;
    state.fanout = state.fanout.filter((s) => s.cb !== cb);
    for (const [group, members] of state.groups) {
      members.members = members.members.filter((m) => m !== cb);
      if (members.members.length === 0) state.groups.delete(group);
    }
    if (state.fanout.length === 0 && state.groups.size === 0) this.#topics.delete(topic);
  }

  /** `topic` has new events (a notification): read them for its subscribers. */
  wake(topic: string): void {
    const state = this.#topics.get(topic);
    if (state === undefined) return;
    void this.#fetch(state);
    for (const group of state.groups.keys()) void this.#claim(state, group);
  }

  /** Read every subscribed topic now; the passes' promises. */
  wakeAll(): Promise<void>[] {
    const passes: Promise<void>[] = [];
    for (const state of this.#topics.values()) {
      passes.push(this.#fetch(state));
      for (const group of state.groups.keys()) passes.push(this.#claim(state, group));
    }
    return passes;
  }

  /** Wait until the passes and callback promises in flight (and those they started) settled. */
  async settle(): Promise<void> {
    for (let round = 0; round < 10 && this.#inFlight.size > 0; round++) {
      await Promise.allSettled([...this.#inFlight]);
    }
  }

  /** A process-local event: to every local fan-out subscriber and one member of each group. */
  deliverLocal(topic: string, published: PublishedEvent): void {
    const state = this.#topics.get(topic);
    if (state === undefined) return;
    const event: Event = { ...published, id: `local:${randomUUID()}`, createdAt: new Date(), deliveryAttempt: 1 };
    for (const s of [...state.fanout]) this.#deliver(topic, s.cb, event, NOOP_ACK, NOOP_ACK, false);
    for (const members of state.groups.values()) this.#deliverLocalToGroup(topic, members, event);
  }

  /** Run `fn` every `ms` until `close()` (the timer does not keep the process alive). */
  every(ms: number, fn: () => void): void {
    const timer = setInterval(() => {
      if (!this.#closed) fn();
    }, ms);
    timer.unref();
    this.#timers.add(timer);
  }

  /** Stop the timers, wait for what is in flight, forget the subscribers. Idempotent. */
  async close(): Promise<void> {
    this.#closed = true;
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers.clear();
    await Promise.allSettled([...this.#inFlight]);
    this.#topics.clear();
  }

  #state(topic: string): TopicState {
    let state = this.#topics.get(topic);
    if (state === undefined) {
      state = { topic, fanout: [], groups: new Map(), fetching: undefined, again: false };
      this.#topics.set(topic, state);
    }
    return state;
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
    const { run, sql, batch } = this.#o;
    try {
      do {
        state.again = false;
        for (;;) {
          if (this.#closed || state.fanout.length === 0) return;
          let from = state.fanout[0]!.cursor;
          for (const s of state.fanout) if (s.cursor < from) from = s.cursor;
          const rows = await run.run('deliver', false, sql.fetch, [state.topic, String(from), batch]);
          for (const row of rows) {
            const id = BigInt(row[0] as string);
            const event = decode(row, 1);
            for (const s of [...state.fanout]) {
              if (s.cursor >= id) continue;
              s.cursor = id;
              this.#deliver(state.topic, s.cb, event, NOOP_ACK, NOOP_ACK, false);
            }
          }
          if (rows.length < batch) break;
        }
      } while (state.again);
    } catch (error) {
      if (!this.#closed) this.#o.logger.error(`[PostgresPubSub] reading ${state.topic} failed`, describe(error));
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
    const { run, sql, batch, consumer, ackTimeoutMs, maxDeliveryAttempts } = this.#o;
    try {
      do {
        members.again = false;
        for (;;) {
          if (this.#closed || members.members.length === 0) return;
          const args = [group, state.topic, consumer, batch, ackTimeoutMs, maxDeliveryAttempts];
          const rows = await run.run('deliver', true, sql.claim, args);
          for (const row of rows) {
            if (row[5] === true) {
              this.#parked(state.topic, group, String(row[0]), Number(row[4]), 'its ack timed out');
              continue;
            }
            const member = this.#pick(members);
            if (member === undefined) break; // unsubscribed meanwhile: the claims expire to others
            const { ack, nack } = this.#settlers(state, group, row[0] as string);
            this.#deliver(state.topic, member, decode(row, Number(row[4])), ack, nack, true);
          }
          if (rows.length < batch) break;
        }
      } while (members.again);
    } catch (error) {
      if (!this.#closed) this.#o.logger.error(`[PostgresPubSub] claiming ${state.topic} for ${group} failed`, describe(error));
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
    const { run, sql, consumer, nackDelayMs, maxDeliveryAttempts } = this.#o;
    let settled: Promise<void> | undefined;
    const ack: Ack = () => {
      settled ??= run.run('ack', true, sql.ack, [group, state.topic, id, consumer]).then(() => undefined);
      return settled;
    };
    const nack: Ack = () => {
      settled ??= run
        .run('nack', true, sql.nack, [group, state.topic, id, consumer, nackDelayMs, maxDeliveryAttempts])
        .then((rows) => {
          if (rows[0]?.[0] === true) this.#parked(state.topic, group, id, maxDeliveryAttempts, 'it was nacked');
          else this.#after(nackDelayMs, () => void this.#claim(state, group));
        });
      return settled;
    };
    return { ack, nack };
  }

  /** Run `cb` without awaiting it (Mastra's contract); a rejection nacks a group delivery. */
  #deliver(topic: string, cb: EventCallback, event: Event, ack: Ack, nack: Ack, grouped: boolean): void {
    const logger = this.#o.logger;
    const failed = (error: unknown): void => {
      logger.error(`[PostgresPubSub] subscriber failed for ${topic}`, error);
      if (grouped) nack().catch((e: unknown) => logger.error(`[PostgresPubSub] nack failed for ${topic}`, describe(e)));
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

  #deliverLocalToGroup(topic: string, members: GroupState, event: Event): void {
    const member = this.#pick(members);
    if (member === undefined) return;
    let settled = false;
    const nack: Ack = () => {
      if (!settled) {
        settled = true;
        const attempt = event.deliveryAttempt ?? 1;
        if (attempt >= this.#o.maxDeliveryAttempts) {
          this.#parked(topic, '(local)', event.id, attempt, 'it was nacked; a local-only event is dropped');
          return Promise.resolve();
        }
        const again = { ...event, deliveryAttempt: attempt + 1 };
        this.#after(this.#o.nackDelayMs, () => this.#deliverLocalToGroup(topic, members, again));
      }
      return Promise.resolve();
    };
    const ack: Ack = () => {
      settled = true;
      return Promise.resolve();
    };
    this.#deliver(topic, member, event, ack, nack, true);
  }

  /** Say (warn) that a group event reached max delivery attempts and is no longer delivered. */
  #parked(topic: string, group: string, id: string, attempts: number, why: string): void {
    const logger = this.#o.logger;
    (logger.warn ?? logger.error).call(
      logger,
      `[PostgresPubSub] event ${id} on ${topic} for group ${group} reached max delivery attempts (${attempts}) and ` +
        `${why}: parked, not delivered again (its claim has visible_at = 'infinity'; see the README)`,
      { topic, group, eventId: id, attempts },
    );
  }

  #track<T>(promise: Promise<T>): Promise<T> {
    this.#inFlight.add(promise);
    const done = (): boolean => this.#inFlight.delete(promise);
    promise.then(done, done);
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
}
