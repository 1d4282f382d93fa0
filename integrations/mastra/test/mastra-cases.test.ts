/**
 * The behaviours Mastra's own suites check of a lease provider and a PubSub (the in-memory
 * provider's and RedisStreamsPubSub's), written afresh for `PostgresPubSub` across two
 * instances on separate pools, in real time: exact result shapes (`deepEqual`, as upstream's
 * `toEqual`), expiry, renewal, transfer, one winner of a race; different groups each getting
 * every event; one callback on two topics unsubscribed from one.
 */

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';

import type { Event, EventCallback } from '@mastra/core/events';

import { PostgresPubSub } from '../src/index.js';
import { createDatabase, sleep, until, type TestDatabase } from './helpers.js';

let db: TestDatabase;
let a: PostgresPubSub;
let b: PostgresPubSub;

before(async () => {
  db = await createDatabase();
  a = new PostgresPubSub({ connectionString: db.url }, { maxConnections: 4, pollIntervalMs: 100 });
  b = new PostgresPubSub({ connectionString: db.url }, { maxConnections: 4, pollIntervalMs: 100 });
});

after(async () => {
  await Promise.all([a.close(), b.close()]);
  await db.drop();
});

const key = (): string => `lease-${randomUUID()}`;

test('a free key is granted with exactly { acquired: true, owner }, and re-acquired the same way', async () => {
  const k = key();
  assert.deepEqual(await a.acquireLease(k, 'owner-a', 5_000), { acquired: true, owner: 'owner-a' });
  assert.equal(await a.getLeaseOwner(k), 'owner-a');
  assert.deepEqual(await a.acquireLease(k, 'owner-a', 5_000), { acquired: true, owner: 'owner-a' });
});

test('a held key is refused across instances with exactly { acquired: false, owner: holder }', async () => {
  const k = key();
  assert.deepEqual(await a.acquireLease(k, 'owner-a', 5_000), { acquired: true, owner: 'owner-a' });
  assert.deepEqual(await b.acquireLease(k, 'owner-b', 5_000), { acquired: false, owner: 'owner-a' });
  assert.equal(await b.getLeaseOwner(k), 'owner-a');
});

test('of two instances racing, exactly one wins and the other names it', async () => {
  for (let i = 0; i < 5; i++) {
    const k = key();
    const results = await Promise.all([a.acquireLease(k, 'owner-a', 5_000), b.acquireLease(k, 'owner-b', 5_000)]);
    const winners = results.filter((r) => r.acquired);
    assert.equal(winners.length, 1);
    assert.equal(results.find((r) => !r.acquired)!.owner, winners[0]!.owner);
  }
});

test('a lease expires after its TTL and another owner takes it', async () => {
  const k = key();
  assert.equal((await a.acquireLease(k, 'owner-a', 100)).acquired, true);
  await sleep(200);
  assert.equal(await a.getLeaseOwner(k), undefined);
  assert.deepEqual(await b.acquireLease(k, 'owner-b', 5_000), { acquired: true, owner: 'owner-b' });
  assert.equal(await a.renewLease(k, 'owner-a', 1_000), false, 'an expired lease is not renewed');
});

test('renew extends past the first expiry; another owner can neither renew nor release it', async () => {
  const k = key();
  await a.acquireLease(k, 'owner-a', 300);
  await sleep(100);
  assert.equal(await a.renewLease(k, 'owner-a', 1_500), true);
  assert.equal(await b.renewLease(k, 'owner-b', 5_000), false);
  await b.releaseLease(k, 'owner-b');
  await sleep(400);
  assert.equal(await b.getLeaseOwner(k), 'owner-a');
  await a.releaseLease(k, 'owner-a');
  assert.equal(await b.getLeaseOwner(k), undefined);
});

test('transfer moves a live lease with a fresh TTL; not from a non-owner, not after expiry', async () => {
  const k = key();
  await a.acquireLease(k, 'owner-a', 300);
  assert.equal(await b.transferLease(k, 'someone-else', 'owner-b', 5_000), false);
  await sleep(100);
  assert.equal(await a.transferLease(k, 'owner-a', 'owner-b', 1_500), true);
  await sleep(400); // past the first expiry, within the transferred one
  assert.equal(await b.getLeaseOwner(k), 'owner-b');
  const gone = key();
  await a.acquireLease(gone, 'owner-a', 100);
  await sleep(200);
  assert.equal(await a.transferLease(gone, 'owner-a', 'owner-b', 5_000), false);
  assert.equal(await a.getLeaseOwner(gone), undefined);
  assert.equal(await a.getLeaseOwner(key()), undefined);
});

test('different groups on one topic each get every event; plain subscribers on other topics get none', async () => {
  const topic = `t-${randomUUID()}`;
  const inA: Event[] = [];
  const inB: Event[] = [];
  const other: Event[] = [];
  const acking = (into: Event[]): EventCallback => (event, ack) => {
    into.push(event);
    void ack?.();
  };
  await a.subscribe(topic, acking(inA), { group: 'group-a' });
  await b.subscribe(topic, acking(inB), { group: 'group-b' });
  await b.subscribe(`${topic}-other`, acking(other));
  await a.publish(topic, { type: 'broadcast', runId: 'r', data: null });
  await until('both groups', () => inA.length === 1 && inB.length === 1);
  await sleep(200);
  assert.deepEqual([inA.length, inB.length, other.length], [1, 1, 0]);
});

test('one callback on two topics, unsubscribed from one, still gets the other', async () => {
  const [t1, t2] = [`t-${randomUUID()}`, `t-${randomUUID()}`];
  const seen: string[] = [];
  const cb: EventCallback = (event) => void seen.push(event.type);
  await b.subscribe(t1, cb);
  await b.subscribe(t2, cb);
  await a.publish(t1, { type: 'a-1', runId: 'r', data: null });
  await a.publish(t2, { type: 'b-1', runId: 'r', data: null });
  await until('both', () => seen.length === 2);
  await b.unsubscribe(t1, cb);
  await a.publish(t1, { type: 'a-2', runId: 'r', data: null });
  await a.publish(t2, { type: 'b-2', runId: 'r', data: null });
  await until('b-2', () => seen.includes('b-2'));
  await sleep(300);
  assert.equal(seen.includes('a-2'), false);
});
