/** `withLeases`: any Mastra PubSub gains the PostgreSQL leases; delivery stays the inner's. */

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { InMemoryServerCache } from '@mastra/core/cache';
import { EventEmitterPubSub, NoopLeaseProvider, PubSub, isLeaseProvider, withCaching } from '@mastra/core/events';
import type { Event, LeaseProvider } from '@mastra/core/events';

import { LeaseTypeError, PostgresLeaseProvider, withLeases } from '../src/index.js';
import { createDatabase, type TestDatabase } from './helpers.js';

let db: TestDatabase;
let provider: PostgresLeaseProvider;

before(async () => {
  db = await createDatabase();
  provider = new PostgresLeaseProvider({ connectionString: db.url });
});

after(async () => {
  await provider.close();
  await db.drop();
});

/** How Mastra 1.71's signals runtime resolves the lease provider of its pubsub. */
function resolveLeases(pubsub: PubSub): LeaseProvider {
  const unwrap = (pubsub as { getLeaseProvider?: () => LeaseProvider | undefined }).getLeaseProvider;
  if (typeof unwrap === 'function') return unwrap.call(pubsub) ?? NoopLeaseProvider;
  return isLeaseProvider(pubsub) ? pubsub : NoopLeaseProvider;
}

test('a PubSub gets the PostgreSQL leases instead of its own', async () => {
  const inner = new EventEmitterPubSub(); // leases in process memory only
  assert.equal(resolveLeases(inner), inner);
  const pubsub = withLeases(inner, provider);
  assert.ok(pubsub instanceof PubSub);
  assert.equal(isLeaseProvider(pubsub), true);
  assert.equal(resolveLeases(pubsub), provider);
  assert.deepEqual(await pubsub.acquireLease('thread\0a', 'run-1', 30_000).then((r) => [r.acquired, r.owner]), [true, 'run-1']);
  assert.equal((await pubsub.acquireLease('thread\0a', 'run-2', 30_000)).owner, 'run-1');
  assert.equal(await provider.getLeaseOwner('thread\0a'), 'run-1'); // in the table, not in memory
  assert.equal(await pubsub.transferLease('thread\0a', 'run-1', 'run-2', 30_000), true);
  assert.equal(await pubsub.renewLease('thread\0a', 'run-2', 30_000), true);
  assert.equal(await pubsub.getLeaseOwner('thread\0a'), 'run-2');
  await pubsub.releaseLease('thread\0a', 'run-2');
  assert.equal(await provider.getLeaseOwner('thread\0a'), undefined);
  await inner.close();
});

test('events still flow through the inner PubSub', async () => {
  const inner = new EventEmitterPubSub();
  const pubsub = withLeases(inner, provider);
  assert.deepEqual(pubsub.supportedModes, inner.supportedModes);
  const got = new Promise<Event>((resolve) => {
    void pubsub.subscribe('topic-1', (event) => resolve(event));
  });
  await pubsub.publish('topic-1', { type: 'ping', data: { n: 1 }, runId: 'r' });
  const event = await got;
  assert.equal(event.type, 'ping');
  assert.deepEqual(event.data, { n: 1 });
  assert.equal(pubsub.getInner(), inner);
  await pubsub.flush();
  await inner.close();
});

test('with CachingPubSub outside or inside, the runtime still finds the PostgreSQL leases', async () => {
  const inner = new EventEmitterPubSub();
  const cached = withCaching(withLeases(inner, provider), new InMemoryServerCache());
  assert.ok(await resolveLeases(cached).acquireLease('thread\0c', 'run-c', 30_000).then((r) => r.acquired));
  assert.equal(await provider.getLeaseOwner('thread\0c'), 'run-c');
  const leasedCache = withLeases(withCaching(inner, new InMemoryServerCache()), provider);
  assert.equal(resolveLeases(leasedCache), provider);
  // No lease method ever falls back to the no-op provider.
  assert.notEqual(resolveLeases(cached), NoopLeaseProvider);
  await inner.close();
});

test('bad arguments are rejected', () => {
  assert.throws(() => withLeases({} as never, provider), LeaseTypeError);
  assert.throws(() => withLeases(new EventEmitterPubSub(), {} as never), LeaseTypeError);
});
