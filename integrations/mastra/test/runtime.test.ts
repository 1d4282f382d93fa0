/**
 * The real runtime: two Node processes, each `new Mastra({ pubsub: new PostgresPubSub(...),
 * agents })` with a mock model (`@mastra/core/test-utils/llm-mock`) and no other transport
 * (no Redis), share threads through PostgreSQL alone.
 *
 * The mock model holds every call until the test says `finish`, so a run stays active while
 * the test sends follow-ups. Lease handovers are checked in the database: a test-only trigger
 * records every version of the lease row. Each test waits for the thread's lease to be released before it
 * ends: a message sent after `await output.text` but before the finishing run released the
 * lease is lost upstream (Mastra 1.71, with its own PubSub too), so no test sends one then.
 */

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { createDatabase, until, type TestDatabase } from './helpers.js';
import { MastraProcess, type Line } from './mastra-process.js';

let db: TestDatabase;
let a: MastraProcess;
let b: MastraProcess;

before(async () => {
  db = await createDatabase();
  [a, b] = await Promise.all([MastraProcess.start(db.url, 'A'), MastraProcess.start(db.url, 'B')]);
});

after(async () => {
  await Promise.all([a?.stop(), b?.stop()]);
  await db.drop();
});

const threadKey = (resourceId: string, threadId: string): string => `${resourceId}\0${threadId}`;

async function owner(key: string): Promise<string | null> {
  return (await a.request({ op: 'owner', key })).owner as string | null;
}

const calls = (p: MastraProcess, text: string): Line[] =>
  p.events.filter((e) => e.event === 'model-call' && (e.texts as string[]).includes(text));

async function finishAndWaitForRelease(key: string, runOwner: MastraProcess, runId: string): Promise<Line> {
  await Promise.all([a.request({ op: 'finish', open: true }), b.request({ op: 'finish', open: true })]);
  const finished = await runOwner.waitFor('the run to finish', (e) => e.event === 'finished' && e.runId === runId);
  await until('the thread lease to be released', async () => (await owner(key)) === null);
  await Promise.all([a.request({ op: 'finish', open: false }), b.request({ op: 'finish', open: false })]);
  return finished;
}

test('signals sent to one idle thread from both processes at once start exactly one run', async () => {
  const key = threadKey('res-1', 'thread-1');
  const [fromA, fromB] = await Promise.all([
    a.send('hello from A', 'res-1', 'thread-1'),
    b.send('hello from B', 'res-1', 'thread-1'),
  ]);
  const actions = [fromA.action, fromB.action].sort();
  assert.deepEqual(actions, ['deliver', 'wake'], JSON.stringify([fromA, fromB]));
  const [winner, loser, won] = fromA.action === 'wake' ? [a, b, fromA] : [b, a, fromB];
  const runId = won.runId as string;
  assert.equal((fromA.action === 'wake' ? fromB : fromA).runId, runId, 'the other signal joined the same run');
  assert.equal(await owner(key), runId, 'the lease table names the run');
  const finished = await finishAndWaitForRelease(key, winner, runId);
  // Both messages reached the one run; the losing process never called the model.
  assert.ok(calls(winner, 'hello from A').length > 0 && calls(winner, 'hello from B').length > 0);
  assert.deepEqual([...calls(loser, 'hello from A'), ...calls(loser, 'hello from B')], []);
  assert.match(finished.text as string, /hello from B/);
});

test("a follow-up sent to the process that does not own the thread reaches the owner's run", async () => {
  const key = threadKey('res-2', 'thread-2');
  const first = await a.send('first message', 'res-2', 'thread-2');
  assert.equal(first.action, 'wake');
  const runId = first.runId as string;
  await a.waitFor('the run to call the model', (e) => e.event === 'model-call' && (e.texts as string[]).includes('first message'));
  assert.equal(await owner(key), runId);
  const followUp = await b.send('follow-up via B', 'res-2', 'thread-2');
  assert.deepEqual([followUp.action, followUp.runId], ['deliver', runId]);
  const finished = await finishAndWaitForRelease(key, a, runId);
  const seen = calls(a, 'follow-up via B');
  assert.ok(seen.length > 0, "the owner's run saw the follow-up");
  assert.ok((seen[0]!.texts as string[]).includes('first message'), 'in the same conversation turn sequence');
  assert.deepEqual(calls(b, 'follow-up via B'), []);
  assert.match(finished.text as string, /follow-up via B/);
});

test('when the owner is killed mid-run, the thread is taken over after the lease TTL and its forwarded message is not lost', async () => {
  // A short thread lease (Mastra reads it from the environment) keeps the test quick.
  const env = { MASTRA_AGENT_THREAD_LEASE_TTL_MS: '2000' };
  const [c, d] = await Promise.all([MastraProcess.start(db.url, 'C', env), MastraProcess.start(db.url, 'D', env)]);
  try {
    const key = threadKey('res-3', 'thread-3');
    const first = await c.send('before the crash', 'res-3', 'thread-3');
    assert.equal(first.action, 'wake');
    await c.waitFor('the run to call the model', (e) => e.event === 'model-call');
    assert.equal((await d.request({ op: 'owner', key })).owner, first.runId);
    // A follow-up sent to the other process is forwarded to the owner's run, which then dies.
    const forwarded = await d.send('sent before the crash', 'res-3', 'thread-3');
    assert.deepEqual([forwarded.action, forwarded.runId], ['deliver', first.runId]);
    assert.equal((await addressedTo(first.runId as string)).length, 1, 'the forwarded message is stored, addressed to the owner');
    c.kill(); // mid-run: its lease is renewed no more
    await until('the dead owner\'s lease to expire', async () => (await d.request({ op: 'owner', key })).owner === null);
    const next = await d.send('after the crash', 'res-3', 'thread-3');
    assert.equal(next.action, 'wake', JSON.stringify(next));
    assert.notEqual(next.runId, first.runId);
    assert.equal((await d.request({ op: 'owner', key })).owner, next.runId);
    // The message forwarded to the dead run was handed to the run that took the thread over.
    const handed = await addressedTo(next.runId as string);
    assert.equal(handed.length, 1, JSON.stringify(handed));
    assert.equal(handed[0]!.text, 'sent before the crash');
    await d.request({ op: 'finish', open: true });
    await d.waitFor('the new run to process the forwarded message', (e) => e.event === 'model-call' && (e.texts as string[]).includes('sent before the crash'));
    await d.waitFor('the new run to finish', (e) => e.event === 'finished' && e.runId === next.runId);
    await until('the new lease to be released', async () => (await d.request({ op: 'owner', key })).owner === null);
    assert.deepEqual(calls(c, 'sent before the crash'), [], 'the dead run never got to it');
  } finally {
    c.kill();
    await d.stop();
  }
});

/** The forwarded messages (`signal-enqueued` events) addressed to run `runId`, with their text. */
async function addressedTo(runId: string): Promise<{ text: string; sourceId: string }[]> {
  const client = await db.client();
  try {
    const { rows } = await client.query<{ text: string; sourceId: string }>(
      `SELECT payload::jsonb #>> '{data,signal,contents}' AS text, payload::jsonb #>> '{data,sourceId}' AS "sourceId"
       FROM leases_events WHERE payload->>'type' = 'signal-enqueued' AND payload->'data'->>'runId' = $1 ORDER BY id`,
      [runId],
    );
    return rows;
  } finally {
    await client.end();
  }
}

test('a queued follow-up run takes the lease over by transfer, with no moment where the key is free', async () => {
  // Every version of the lease row, as the database saw it (a test-only audit trigger).
  const client = await db.client();
  try {
    await client.query(`CREATE TABLE lease_audit (n bigserial, key bytea, owner bytea, fence bigint,
      expires_at timestamptz, at timestamptz DEFAULT clock_timestamp())`);
    await client.query(`CREATE FUNCTION lease_audit() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN INSERT INTO lease_audit (key, owner, fence, expires_at) VALUES (NEW.key, NEW.owner, NEW.fence, NEW.expires_at);
      RETURN NULL; END $$`);
    await client.query('CREATE TRIGGER lease_audit AFTER INSERT OR UPDATE ON leases FOR EACH ROW EXECUTE FUNCTION lease_audit()');
  } finally {
    await client.end();
  }
  const key = threadKey('res-4', 'thread-4');
  const first = await a.send('the first run', 'res-4', 'thread-4');
  assert.equal(first.action, 'wake');
  await a.waitFor('the first run to call the model', (e) => e.event === 'model-call' && (e.texts as string[]).includes('the first run'));
  const queued = await a.queue('the queued run', 'res-4', 'thread-4');
  assert.equal(queued.action, 'deliver', JSON.stringify(queued));
  const nextRunId = queued.runId as string;
  assert.notEqual(nextRunId, first.runId);
  await Promise.all([a.request({ op: 'finish', open: true }), b.request({ op: 'finish', open: true })]);
  await a.waitFor('the queued run to call the model', (e) => e.event === 'model-call' && (e.texts as string[]).includes('the queued run'));
  await until('the thread lease to be released', async () => (await owner(key)) === null);
  await Promise.all([a.request({ op: 'finish', open: false }), b.request({ op: 'finish', open: false })]);
  const reader = await db.client();
  let rows: { owner: string; fence: string; free: boolean }[];
  try {
    ({ rows } = await reader.query<{ owner: string; fence: string; free: boolean }>(
      `SELECT convert_from(owner, 'UTF8') AS owner, fence, expires_at <= at AS free FROM lease_audit
       WHERE key = $1 ORDER BY n`,
      [Buffer.from(key)],
    ));
  } finally {
    await reader.end();
  }
  // The first run's versions (live), then the queued run's: no released version in between.
  const handover = rows.findIndex((r) => r.owner === nextRunId);
  assert.ok(handover > 0, JSON.stringify(rows));
  assert.ok(rows.slice(0, handover).every((r) => r.owner === first.runId && !r.free), JSON.stringify(rows));
  assert.ok(BigInt(rows[handover]!.fence) > BigInt(rows[0]!.fence), 'the transfer is a new tenure');
  assert.ok(rows.slice(handover).every((r) => r.owner === nextRunId), JSON.stringify(rows));
  assert.equal(rows.at(-1)!.free, true, 'released at the end');
  assert.deepEqual(calls(b, 'the queued run'), []);
});

test('a 4,000-byte thread key: signals from both processes at once start exactly one run (the key is mapped, not refused)', async () => {
  const [resourceId, threadId] = ['r'.repeat(2000), 't\u00e9'.repeat(700)];
  const key = threadKey(resourceId, threadId);
  assert.ok(Buffer.byteLength(key) > 4000);
  const [fromA, fromB] = await Promise.all([a.send('long from A', resourceId, threadId), b.send('long from B', resourceId, threadId)]);
  assert.deepEqual([fromA.action, fromB.action].sort(), ['deliver', 'wake'], JSON.stringify([fromA, fromB]));
  assert.equal(fromA.runId, fromB.runId, 'the other signal joined the same run');
  const [winner, loser] = fromA.action === 'wake' ? [a, b] : [b, a];
  const runId = fromA.runId as string;
  assert.equal(await owner(key), runId, 'the lease table names the run');
  await finishAndWaitForRelease(key, winner, runId);
  assert.ok(calls(winner, 'long from A').length > 0 && calls(winner, 'long from B').length > 0);
  assert.deepEqual([...calls(loser, 'long from A'), ...calls(loser, 'long from B')], []);
});

test('a run whose id has a lone surrogate owns its thread: a signal from the other process is delivered to it', async () => {
  const key = threadKey('res-lone', 'thread-lone');
  const runId = 'run-\ud800-lone';
  const started = await a.request({ op: 'stream', text: 'lone run', resourceId: 'res-lone', threadId: 'thread-lone', runId });
  assert.equal(started.runId, runId, JSON.stringify(started));
  await until('the lease to name the run', async () => (await owner(key)) === runId);
  const fromB = await b.send('to the lone run', 'res-lone', 'thread-lone');
  assert.deepEqual([fromB.action, fromB.runId], ['deliver', runId], JSON.stringify(fromB));
  await finishAndWaitForRelease(key, a, runId);
  assert.ok(calls(a, 'to the lone run').length > 0, 'the owner run took the signal in');
  assert.deepEqual(calls(b, 'to the lone run'), []);
});
