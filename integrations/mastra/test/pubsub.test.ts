/**
 * `PostgresPubSub` on a real PostgreSQL: delivery between instances on separate pools, consumer
 * groups, replay from offsets, clearTopic, flush, localOnly, retention, bad input; and it leases.
 */

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { NoopLeaseProvider, isLeaseProvider } from '@mastra/core/events';
import type { Event, EventCallback, LeaseProvider } from '@mastra/core/events';

import { LeaseError, LeaseRangeError, LeaseTypeError, PostgresPubSub, type PubSubOptions } from '../src/index.js';
import { createDatabase, until, type TestDatabase } from './helpers.js';

let db: TestDatabase;
const open: PostgresPubSub[] = [];
let topicSerial = 0;

/** A PubSub on a pool of its own (as another process would have). */
function pubsub(options: PubSubOptions = {}): PostgresPubSub {
  const instance = new PostgresPubSub({ connectionString: db.url }, { maxConnections: 4, ...options });
  open.push(instance);
  return instance;
}

const topic = (): string => `topic-${++topicSerial}`;

/** A callback that records what it gets (and acks, unless told not to). */
function recorder(options: { ack?: boolean } = {}): { cb: EventCallback; got: Event[] } {
  const got: Event[] = [];
  const cb: EventCallback = async (event, ack) => {
    got.push(event);
    if (options.ack !== false) await ack?.();
  };
  return { cb, got };
}

before(async () => {
  db = await createDatabase();
});

after(async () => {
  await Promise.all(open.map((p) => p.close()));
  await db.drop();
});

async function rows(sql: string, values: unknown[] = []): Promise<unknown[][]> {
  const client = await db.client();
  try {
    return (await client.query({ text: sql, values, rowMode: 'array' })).rows as unknown[][];
  } finally {
    await client.end();
  }
}

test('it is a lease provider the signals runtime finds with no other setting', async () => {
  const ps = pubsub();
  assert.equal(isLeaseProvider(ps), true);
  const resolved: LeaseProvider = ps.getLeaseProvider();
  assert.notEqual(resolved, NoopLeaseProvider);
  assert.deepEqual(await ps.acquireLease('thread\0x', 'run-1', 30_000), { acquired: true, owner: 'run-1' });
  assert.deepEqual(await ps.acquireLease('thread\0x', 'run-2', 30_000), { acquired: false, owner: 'run-1' });
  assert.deepEqual(await ps.acquireLease('plain', 'run-1', 30_000), { acquired: true, owner: 'run-1' });
  assert.equal(typeof (await ps.acquireFencedLease('thread\0x', 'run-2', 30_000)).fence, 'bigint');
  assert.equal(await ps.leases.getLeaseOwner('thread\0x'), 'run-1');
  assert.equal(await ps.transferLease('thread\0x', 'run-1', 'run-2', 30_000), true);
  assert.equal(await ps.renewLease('thread\0x', 'run-2', 30_000), true);
  await ps.releaseLease('thread\0x', 'run-2');
  assert.equal(await ps.getLeaseOwner('thread\0x'), undefined);
});

test('an event published by one instance reaches subscribers of others, in order, intact', async () => {
  const [a, b, c] = [pubsub(), pubsub(), pubsub()];
  const t = topic();
  const onB = recorder();
  const onC = recorder();
  await b.subscribe(t, onB.cb);
  await c.subscribe(t, onC.cb);
  for (let i = 0; i < 20; i++) {
    await a.publish(t, { type: 'step', runId: 'thread\0key', data: { i, text: 'NUL \0 inside', nested: [1, { x: null }] } });
  }
  await until('both subscribers got 20 events', () => onB.got.length === 20 && onC.got.length === 20);
  for (const got of [onB.got, onC.got]) {
    assert.deepEqual(got.map((e) => (e.data as { i: number }).i), [...Array(20).keys()]);
    assert.deepEqual(got.map((e) => e.index), [...Array(20).keys()]);
  }
  const first = onB.got[0]!;
  assert.equal(first.type, 'step');
  assert.equal(first.runId, 'thread\0key');
  assert.deepEqual(first.data, { i: 0, text: 'NUL \0 inside', nested: [1, { x: null }] });
  assert.ok(first.createdAt instanceof Date);
  assert.equal(typeof first.id, 'string');
  assert.equal(first.deliveryAttempt, 1);
  assert.equal(onC.got[5]!.id, onB.got[5]!.id);
});

test('a plain subscriber gets the events published after subscribe resolved, not before', async () => {
  const [a, b] = [pubsub(), pubsub()];
  const t = topic();
  await a.publish(t, { type: 'before', runId: 'r', data: 1 });
  const onB = recorder();
  await b.subscribe(t, onB.cb);
  await a.publish(t, { type: 'after', runId: 'r', data: 2 });
  await until('the later event', () => onB.got.length === 1);
  await b.flush();
  assert.deepEqual(onB.got.map((e) => e.type), ['after']);
});

test('a consumer group delivers each event to exactly one member across instances', async () => {
  const [publisher, a, b] = [pubsub(), pubsub(), pubsub()];
  const t = topic();
  const onA = recorder();
  const onB = recorder();
  const onA2 = recorder();
  await a.subscribe(t, onA.cb, { group: 'workers' });
  await a.subscribe(t, onA2.cb, { group: 'workers' });
  await b.subscribe(t, onB.cb, { group: 'workers' });
  const watcher = recorder(); // a fan-out subscriber still sees every event
  await b.subscribe(t, watcher.cb);
  const n = 60;
  await Promise.all([...Array(n).keys()].map((i) => publisher.publish(t, { type: 'job', runId: `r${i}`, data: { i } })));
  const all = (): Event[] => [...onA.got, ...onA2.got, ...onB.got];
  await until('every job delivered', () => all().length >= n && watcher.got.length === n);
  await Promise.all([a.flush(), b.flush()]);
  const ids = all().map((e) => (e.data as { i: number }).i);
  assert.equal(ids.length, n, 'no event delivered twice');
  assert.deepEqual(new Set(ids).size, n);
  await until('every claim acknowledged', async () => (await rows('SELECT count(*) FROM leases_event_claims'))[0]![0] === '0');
});

test('an event left unacknowledged goes to another member with the next deliveryAttempt', async () => {
  const quick = { ackTimeoutMs: 300, pollIntervalMs: 50 };
  const [publisher, a, b] = [pubsub(quick), pubsub(quick), pubsub(quick)];
  const t = topic();
  const silent = recorder({ ack: false });
  await a.subscribe(t, silent.cb, { group: 'g' });
  await publisher.publish(t, { type: 'job', runId: 'r', data: 'once' });
  await until('the first delivery', () => silent.got.length === 1);
  await a.unsubscribe(t, silent.cb); // a crashed member: it never acks
  const onB = recorder();
  await b.subscribe(t, onB.cb, { group: 'g' });
  await until('the redelivery', () => onB.got.length === 1);
  assert.equal(onB.got[0]!.id, silent.got[0]!.id);
  assert.equal(onB.got[0]!.deliveryAttempt, 2);
});

test('a nack or a rejected callback delivers the event again', async () => {
  const [publisher, a] = [pubsub(), pubsub({ nackDelayMs: 0, logger: { error: () => undefined } })];
  const t = topic();
  const seen: number[] = [];
  await a.subscribe(
    t,
    async (event, ack, nack) => {
      seen.push(event.deliveryAttempt ?? 0);
      if (event.deliveryAttempt === 1) return nack?.();
      if (event.deliveryAttempt === 2) throw new Error('handler failed (expected by the test)');
      return ack?.();
    },
    { group: 'g' },
  );
  await publisher.publish(t, { type: 'job', runId: 'r', data: null });
  await until('the third attempt', () => seen.length === 3);
  assert.deepEqual(seen, [1, 2, 3]);
});

/** A callback that nacks every delivery, counting them. */
function nacker(): { cb: EventCallback; attempts: number[] } {
  const attempts: number[] = [];
  const cb: EventCallback = (event, _ack, nack) => {
    attempts.push(event.deliveryAttempt ?? 0);
    void nack?.();
  };
  return { cb, attempts };
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

test('maxDeliveryAttempts: an always-nacked event is delivered that many times, then parked, kept and visible', async () => {
  const warned: string[] = [];
  const logger = { debug: () => undefined, warn: (message: string) => void warned.push(message) };
  const [publisher, a] = [pubsub(), pubsub({ nackDelayMs: 0, maxDeliveryAttempts: 3, logger })];
  const t = topic();
  const poison = nacker();
  await a.subscribe(t, poison.cb, { group: 'capped' });
  await publisher.publish(t, { type: 'poison', runId: 'r', data: null });
  await until('three deliveries', () => poison.attempts.length >= 3);
  await sleep(500); // a fourth would come within this
  assert.deepEqual(poison.attempts, [1, 2, 3]);
  assert.ok(warned.some((w) => /max delivery attempts/.test(w)), JSON.stringify(warned));
  // Parked, not deleted: the event is retained and its claim says so (what operators query).
  const parked = await rows(
    `SELECT c.attempts, c.visible_at = 'infinity', e.payload->>'type' FROM leases_event_claims AS c
     JOIN leases_events AS e ON e.id = c.event_id WHERE c.topic = $1 AND c.group_name = 'capped'`,
    [t],
  );
  assert.deepEqual(parked, [[3, true, 'poison']]);
  // Other events of the group still flow.
  const good = recorder();
  await a.unsubscribe(t, poison.cb);
  await a.subscribe(t, good.cb, { group: 'capped' });
  await publisher.publish(t, { type: 'fine', runId: 'r', data: null });
  await until('the next event', () => good.got.length === 1);
  assert.equal(good.got[0]!.type, 'fine');
});

test('maxDeliveryAttempts also ends redelivery after ack timeouts; Infinity never parks; 0 reads as Infinity with a warning', async () => {
  const [publisher, a] = [pubsub(), pubsub({ ackTimeoutMs: 100, pollIntervalMs: 50, maxDeliveryAttempts: 2, logger: { warn: () => undefined } })];
  const t = topic();
  const silent = recorder({ ack: false });
  await a.subscribe(t, silent.cb, { group: 'timeouts' });
  await publisher.publish(t, { type: 'hangs', runId: 'r', data: null });
  await until('two deliveries', () => silent.got.length >= 2);
  await until('the claim parked', async () => (await rows(`SELECT visible_at = 'infinity' FROM leases_event_claims WHERE topic = $1`, [t]))[0]?.[0] === true);
  await sleep(400);
  assert.deepEqual(silent.got.map((e) => e.deliveryAttempt), [1, 2]);

  const unlimited = pubsub({ nackDelayMs: 0, maxDeliveryAttempts: Infinity });
  const u = topic();
  const poison = nacker();
  await unlimited.subscribe(u, poison.cb, { group: 'forever' });
  await publisher.publish(u, { type: 'poison', runId: 'r', data: null });
  await until('eight deliveries', () => poison.attempts.length >= 8);
  await unlimited.unsubscribe(u, poison.cb);

  const warned: string[] = [];
  pubsub({ maxDeliveryAttempts: 0, logger: { error: () => undefined, warn: (m: string) => void warned.push(m) } });
  assert.ok(warned.some((w) => /maxDeliveryAttempts=0/.test(w)));
  assert.throws(() => pubsub({ maxDeliveryAttempts: -1 }), RangeError);
  assert.throws(() => pubsub({ maxDeliveryAttempts: 1.5 }), TypeError);
});

test('events published while a group has no member wait for it; a new group can start at the head', async () => {
  const [publisher, first, later] = [pubsub(), pubsub(), pubsub()];
  const t = topic();
  const onFirst = recorder();
  await first.subscribe(t, onFirst.cb, { group: 'durable' });
  await publisher.publish(t, { type: 'job', runId: 'r', data: 0 });
  await until('the first event', () => onFirst.got.length === 1);
  await first.flush();
  await first.close(); // the group's only member is down
  for (let i = 1; i <= 3; i++) await publisher.publish(t, { type: 'job', runId: 'r', data: i });
  const onLater = recorder();
  await later.subscribe(t, onLater.cb, { group: 'durable' });
  const fresh = recorder();
  await later.subscribe(t, fresh.cb, { group: 'newcomer', startFrom: 'latest' });
  await until('the waiting events', () => onLater.got.length === 3);
  assert.deepEqual(onLater.got.map((e) => e.data), [1, 2, 3]);
  await publisher.publish(t, { type: 'job', runId: 'r', data: 4 });
  await until('the live event', () => fresh.got.length === 1 && onLater.got.length === 4);
  assert.deepEqual(fresh.got.map((e) => e.data), [4]);
});

test('history and replay from an offset, then live events', async () => {
  const [a, b] = [pubsub(), pubsub()];
  const t = topic();
  for (let i = 0; i < 5; i++) await a.publish(t, { type: 'part', runId: 'r', data: i });
  assert.deepEqual((await b.getHistory(t)).map((e) => e.data), [0, 1, 2, 3, 4]);
  assert.deepEqual((await b.getHistory(t, 3)).map((e) => [e.index, e.data]), [[3, 3], [4, 4]]);
  assert.equal(b.supportsOffsets, true);
  const fromTwo = recorder();
  const all = recorder();
  const latest = recorder();
  await b.subscribeFromOffset(t, 2, fromTwo.cb);
  await b.subscribeWithReplay(t, all.cb);
  await b.subscribe(t, latest.cb, { startFrom: 'latest' });
  await a.publish(t, { type: 'part', runId: 'r', data: 5 });
  await until('the live event everywhere', () => fromTwo.got.length === 4 && all.got.length === 6 && latest.got.length === 1);
  assert.deepEqual(fromTwo.got.map((e) => e.index), [2, 3, 4, 5]);
  assert.deepEqual(all.got.map((e) => e.index), [0, 1, 2, 3, 4, 5]);
  const earliest = recorder();
  await b.subscribe(t, earliest.cb, { startFrom: 'earliest' });
  assert.equal(earliest.got.length, 6); // replayed before subscribe resolved
});

test('clearTopic deletes the events, groups and claims of a topic and never throws', async () => {
  const [a, b] = [pubsub({ logger: { error: () => undefined } }), pubsub()];
  const t = topic();
  const other = topic();
  const pending = recorder({ ack: false });
  await b.subscribe(t, pending.cb, { group: 'g' });
  await a.publish(t, { type: 'x', runId: 'r', data: 1 });
  await a.publish(other, { type: 'x', runId: 'r', data: 1 });
  await until('the claim', () => pending.got.length === 1);
  await a.clearTopic(t);
  assert.deepEqual(await a.getHistory(t), []);
  assert.equal((await a.getHistory(other)).length, 1);
  for (const table of ['leases_event_claims', 'leases_event_groups', 'leases_event_topics']) {
    assert.deepEqual(await rows(`SELECT count(*) FROM ${table} WHERE topic = $1`, [t]), [['0']], table);
  }
  await a.clearTopic('bad\0topic'); // logged, not thrown
  await a.clearTopic(42 as never);
});

test('flush waits until the published events reached the callbacks and their promises settled', async () => {
  const [a, b] = [pubsub(), pubsub()];
  const t = topic();
  const done: number[] = [];
  await b.subscribe(t, async (event) => {
    await new Promise((resolve) => setImmediate(resolve));
    done.push(event.data as number);
  });
  await a.publish(t, { type: 'x', runId: 'r', data: 1 });
  await a.publish(t, { type: 'x', runId: 'r', data: 2 });
  await b.flush();
  assert.deepEqual(done, [1, 2]);
});

test('localOnly events stay in the process and out of the table', async () => {
  const [a, b] = [pubsub(), pubsub()];
  const t = topic();
  const local = recorder();
  const localGroup = recorder();
  const remote = recorder();
  await a.subscribe(t, local.cb);
  await a.subscribe(t, localGroup.cb, { group: 'g' });
  await b.subscribe(t, remote.cb);
  await a.publish(t, { type: 'watch', runId: 'r', data: 1 }, { localOnly: true });
  assert.equal(local.got.length, 1);
  assert.equal(localGroup.got.length, 1);
  await a.publish(t, { type: 'marker', runId: 'r', data: 2 });
  await until('the stored marker', () => remote.got.length === 1);
  assert.deepEqual(remote.got.map((e) => e.type), ['marker']);
  assert.deepEqual((await a.getHistory(t)).map((e) => e.type), ['marker']);
});

test('cleanup deletes events past retention, and their claims', async () => {
  const ps = pubsub({ retentionMs: 1, cleanupIntervalMs: 0 });
  const t = topic();
  const pending = recorder({ ack: false });
  await ps.subscribe(t, pending.cb, { group: 'g' });
  await ps.publish(t, { type: 'old', runId: 'r', data: 1 });
  await until('the claim', () => pending.got.length === 1);
  await rows('SELECT pg_sleep(0.01)');
  const removed = await ps.cleanup();
  assert.ok(removed.events >= 1);
  assert.deepEqual(await ps.getHistory(t), []);
  assert.deepEqual(await rows('SELECT count(*) FROM leases_event_claims WHERE topic = $1', [t]), [['0']]);
});

test('topics text cannot hold (NUL, over 1024 bytes, a lone surrogate) are delivered, each apart from its look-alikes', async () => {
  const [publisher, subscriber] = [pubsub(), pubsub()];
  const base = topic();
  const topics = [`${base}\0nul`, `${base}\ufffdnul`, `${base}-${'x'.repeat(3000)}`, `${base}-${'x'.repeat(3000)}y`, `${base}\ud800`, `${base}\ufffd`];
  const got = topics.map(() => recorder());
  for (const [i, t] of topics.entries()) await subscriber.subscribe(t, got[i]!.cb);
  for (const [i, t] of topics.entries()) await publisher.publish(t, { type: 'e', runId: 'r', data: i });
  await until('every topic delivered', () => got.every((g) => g.got.length === 1));
  await subscriber.flush();
  assert.deepEqual(got.map((g) => g.got.map((e) => e.data)), topics.map((_, i) => [i]));
  assert.deepEqual((await publisher.getHistory(topics[2]!)).map((e) => e.data), [2]);
});

test('bad input is rejected before any I/O', async () => {
  assert.throws(() => new PostgresPubSub(null as never), LeaseTypeError);
  assert.throws(() => new PostgresPubSub({ connectionString: db.url }, { retentionMs: 0 }), LeaseRangeError);
  assert.throws(() => new PostgresPubSub({ connectionString: db.url }, { ackTimeoutMs: 1.5 }), LeaseTypeError);
  assert.throws(() => new PostgresPubSub({ connectionString: db.url }, { table: 'bad-name' }), LeaseRangeError);
  assert.throws(() => new PostgresPubSub({ connectionString: db.url }, { batchSize: 0 }), LeaseRangeError);
  // Never started: every rejection below happens before a connection is made.
  const ps = new PostgresPubSub({ connectionString: 'postgresql://nobody@127.0.0.1:1/none' });
  const event = { type: 'x', runId: 'r', data: null };
  await assert.rejects(ps.publish('', event), LeaseRangeError);
  await assert.rejects(ps.publish(7 as never, event), LeaseTypeError);
  await assert.rejects(ps.publish('t', { type: 'x', runId: 'r', data: 1n }), LeaseTypeError);
  await assert.rejects(ps.publish('t', null as never), LeaseTypeError);
  await assert.rejects(ps.subscribe('t', 'nope' as never), LeaseTypeError);
  await assert.rejects(ps.subscribe('t', () => undefined, { group: '' }), LeaseRangeError);
  await assert.rejects(ps.subscribe('t', () => undefined, { startFrom: 'middle' as never }), LeaseRangeError);
  await assert.rejects(ps.subscribeFromOffset('t', -1, () => undefined), LeaseRangeError);
  await assert.rejects(ps.getHistory('t', 0.5), LeaseTypeError);
  await ps.close();
  await assert.rejects(ps.publish('t', event), LeaseError);
});
