/**
 * The handover of forwarded messages (src/thread-leases.ts) without the runtime: Mastra's
 * `signal-enqueued` events addressed to an owner that died go, re-addressed, to the next owner
 * of the thread; those of an owner whose run ended (a terminal event) do not, nor does anything
 * on a same-owner re-acquire. The real runtime's version is in runtime.test.ts.
 */

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import type { Event } from '@mastra/core/events';

import { PostgresPubSub, threadTopic } from '../src/index.js';
import { createDatabase, sleep, until, type TestDatabase } from './helpers.js';

const SHORT = 150; // ms: a lease the test lets expire
const LONG = 30_000;

let db: TestDatabase;
let forwarder: PostgresPubSub; // the process that forwarded the messages (and takes over)
let other: PostgresPubSub; // a process subscribed to the thread's topic

before(async () => {
  db = await createDatabase();
  forwarder = new PostgresPubSub({ connectionString: db.url }, { maxConnections: 4 });
  other = new PostgresPubSub({ connectionString: db.url }, { maxConnections: 4 });
});

after(async () => {
  await Promise.all([forwarder.close(), other.close()]);
  await db.drop();
});

let serial = 0;
const threadKey = (): string => `res\0thread-${++serial}`;

/** Forward `text` to run `runId` as Mastra 1.71 does (from process `sourceId`). */
async function forward(key: string, runId: string, text: string, id = `sig-${text}`): Promise<void> {
  await forwarder.publish(threadTopic(key), {
    type: 'signal-enqueued',
    runId,
    data: { type: 'signal-enqueued', runId, signal: { id, type: 'user', contents: text }, sourceId: 'process-a', preRun: true },
  });
}

/** The thread topic's `signal-enqueued` events addressed to `runId`, as the table holds them. */
async function addressedTo(key: string, runId: string): Promise<Event[]> {
  const history = await other.getHistory(threadTopic(key));
  return history.filter((e) => e.type === 'signal-enqueued' && (e.data as { runId?: string }).runId === runId);
}

test('events of a run id with a lone surrogate on the topic do not stop the handover of others', async () => {
  const key = threadKey();
  assert.equal((await forwarder.acquireLease(key, 'run-dead', SHORT)).acquired, true);
  await forwarder.publish(threadTopic(key), { type: 'run-registered', runId: 'run-\ud800', data: { runId: 'run-\udc00' } });
  await forward(key, 'run-\ud800', 'to the lone one');
  await forward(key, 'run-dead', 'kept');
  await sleep(SHORT * 2);
  const before = forwarder.threadLeases.redelivered;
  assert.equal((await forwarder.acquireLease(key, 'run-next', LONG)).acquired, true);
  assert.equal(forwarder.threadLeases.redelivered - before, 1);
  const handed = await addressedTo(key, 'run-next');
  assert.deepEqual(handed.map((e) => (e.data as { signal: { contents: string } }).signal.contents), ['kept']);
});

test("a dead owner's forwarded messages go to the next owner, once each, re-addressed and admitted", async () => {
  const key = threadKey();
  const seen: Event[] = [];
  await other.subscribe(threadTopic(key), (event) => void seen.push(event));
  assert.equal((await forwarder.acquireLease(key, 'run-dead', SHORT)).acquired, true);
  await forward(key, 'run-dead', 'one');
  await forward(key, 'run-dead', 'two');
  await forward(key, 'run-dead', 'two'); // the same signal twice: handed over once
  await sleep(SHORT * 2); // the owner dies: it renews no more
  const before = forwarder.threadLeases.redelivered;
  const won = await forwarder.acquireLease(key, 'run-next', LONG);
  assert.equal(won.acquired, true);
  assert.equal(forwarder.threadLeases.redelivered - before, 2);
  const handed = await addressedTo(key, 'run-next');
  assert.deepEqual(
    handed.map((e) => [e.runId, (e.data as { signal: { contents: string } }).signal.contents]),
    [['run-next', 'one'], ['run-next', 'two']],
  );
  for (const e of handed) {
    const data = e.data as { sourceId: string; preRun: boolean; signal: { id: string } };
    assert.equal(data.sourceId, 'sql_lease:redelivered', "never the forwarder's own id, which its runtime would skip");
    assert.equal(data.preRun, false);
    assert.match(data.signal.id, /^sig-/, 'the signal keeps its id');
  }
  await until('the re-addressed messages to reach subscribers', () => seen.filter((e) => e.runId === 'run-next').length === 2);
  // The next owner re-acquiring (as every thread-bound run does) hands nothing over again.
  await forwarder.acquireLease(key, 'run-next', LONG);
  assert.equal((await addressedTo(key, 'run-next')).length, 2);
  // If it dies too, the messages move on to the owner after it.
  await forwarder.releaseLease(key, 'run-next'); // (released without an end event: as good as dead)
  assert.equal((await other.acquireLease(key, 'run-third', LONG)).acquired, true);
  assert.equal((await addressedTo(key, 'run-third')).length, 2);
});

test('the forwarded messages of an owner whose run ended stay where they are', async () => {
  const key = threadKey();
  assert.equal((await forwarder.acquireLease(key, 'run-done', LONG)).acquired, true);
  await forward(key, 'run-done', 'taken in');
  // The run ends: its terminal event is published, not awaited, right before its release.
  void forwarder.publish(threadTopic(key), { type: 'run-completed', runId: 'run-done', data: { type: 'run-completed', runId: 'run-done' } });
  await forwarder.releaseLease(key, 'run-done');
  const before = other.threadLeases.redelivered;
  assert.equal((await other.acquireLease(key, 'run-later', LONG)).acquired, true);
  assert.equal(other.threadLeases.redelivered, before);
  assert.deepEqual(await addressedTo(key, 'run-later'), []);
});

test('keys that are not thread keys are plain leases', async () => {
  assert.equal((await forwarder.acquireLease('plain-key', 'a', SHORT)).acquired, true);
  await sleep(SHORT * 2);
  assert.equal((await forwarder.acquireLease('plain-key', 'b', LONG)).acquired, true);
  assert.equal(await forwarder.getLeaseOwner('plain-key'), 'b');
});
