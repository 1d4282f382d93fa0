/**
 * Behind a real PgBouncer (transaction pooling unless said otherwise): without `pooler` the
 * pooler refuses the provider's startup parameters; with `pooler: 'transaction'` every
 * operation works, 64 concurrent callers see no error and one owner at a time, the server-side
 * timeouts are in force inside each call and leak to no other client, and the PubSub delivers
 * by polling, or through a direct `listenConnectionString`.
 */

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import type { Event } from '@mastra/core/events';
import pg from 'pg';

import { LeaseConnectionError, LeaseTimeoutError, LeaseTypeError, PostgresLeaseProvider, PostgresPubSub } from '../src/index.js';
import { literal, render } from '../src/pooler.js';
import { createDatabase, until, type TestDatabase } from './helpers.js';
import { startPgBouncer, type Bouncer } from './pgbouncer.js';

let db: TestDatabase;
let bouncer: Bouncer;
let pooled: string;
const open: { close(): Promise<void> }[] = [];

function provider(options: { timeoutMs?: number; maxConnections?: number } = {}): PostgresLeaseProvider {
  const p = new PostgresLeaseProvider({ connectionString: pooled }, { pooler: 'transaction', ...options });
  open.push(p);
  return p;
}

before(async () => {
  db = await createDatabase();
  bouncer = await startPgBouncer('transaction', 8);
  pooled = bouncer.url(db.name);
});

after(async () => {
  await Promise.all(open.map((p) => p.close()));
  await bouncer.stop();
  await db.drop();
});

test('without pooler the pooler refuses the startup timeouts, as the README says', async () => {
  const plain = new PostgresLeaseProvider({ connectionString: pooled });
  open.push(plain);
  await assert.rejects(plain.getLeaseOwner('k'), (error: unknown) => {
    assert.ok(error instanceof LeaseConnectionError);
    assert.match(error.message, /unsupported startup parameter/);
    return true;
  });
});

test('a bad pooler is refused before any I/O', () => {
  for (const bad of ['statement', 'Transaction', '', 1, true, null]) {
    assert.throws(
      () => new PostgresLeaseProvider({ connectionString: 'postgresql://nowhere.invalid/x' }, { pooler: bad as never }),
      (error: unknown) => error instanceof LeaseTypeError && /pooler must be "transaction" or "session"/.test(error.message),
    );
  }
  assert.throws(
    () => new PostgresPubSub({ connectionString: 'postgresql://nowhere.invalid/x' }, { listenConnectionString: 7 as never }),
    LeaseTypeError,
  );
});

test('values become literals that read back as themselves', () => {
  assert.equal(literal(Buffer.from([0, 0x27, 0x5c, 0xff])), "E'\\\\x00275cff'");
  assert.equal(literal("it's"), "'it''s'");
  assert.equal(literal('back\\slash'), "E'back\\\\slash'");
  assert.equal(literal(5), "'5'");
  assert.equal(literal(null), 'NULL');
  assert.equal(render("SELECT '$1', \"$2\", $1 -- $2\n, $2", ['a', 'b']), "SELECT '$1', \"$2\", 'a' -- $2\n, 'b'");
  assert.throws(() => render('SELECT $2', ['a']), LeaseTypeError);
  assert.throws(() => literal('nul\0'), LeaseTypeError);
});

test('every operation works through transaction pooling, with keys of any bytes', async () => {
  const p = provider();
  const key = "k'\\\0é";
  const won = await p.acquireFencedLease(key, 'a', 30_000);
  assert.equal(won.acquired, true);
  assert.equal((await p.acquireLease(key, 'b', 30_000)).owner, 'a');
  assert.equal(await p.getLeaseOwner(key), 'a');
  assert.equal((await p.getLease(key))?.fence, won.fence);
  assert.equal(await p.renewLease(key, 'a', 30_000), true);
  assert.equal(await p.transferLease(key, 'a', "b'", 30_000), true);
  assert.equal(await p.getLeaseOwner(key), "b'");
  await p.releaseLease(key, "b'");
  assert.equal(await p.getLeaseOwner(key), undefined);
  assert.ok((await p.now()) instanceof Date);
});

test('64 concurrent callers: no errors and one owner at a time', async () => {
  const p = provider({ maxConnections: 64 });
  const keys = ['h0', 'h1', 'h2'];
  const holders = new Map<string, string>();
  let overlaps = 0;
  let wins = 0;
  await Promise.all(
    Array.from({ length: 64 }, async (_, i) => {
      for (let round = 0; round < 20; round++) {
        const key = keys[(i + round) % keys.length] as string;
        const me = `c${i}`;
        if ((await p.acquireLease(key, me, 5_000)).acquired) {
          wins++;
          if (holders.has(key)) overlaps++;
          holders.set(key, me);
          await p.renewLease(key, me, 5_000);
          holders.delete(key);
          await p.releaseLease(key, me);
        }
      }
    }),
  );
  assert.equal(overlaps, 0);
  assert.ok(wins > 20, `only ${wins} acquisitions`);
});

test('a statement stuck on a row lock ends by the server-side timeout, and the setting leaks nowhere', async () => {
  const p = provider({ timeoutMs: 1_000 });
  await p.acquireLease('locked', 'a', 60_000);
  const blocker = await db.client();
  try {
    await blocker.query('BEGIN');
    await blocker.query("SELECT 1 FROM leases WHERE key = convert_to('locked', 'UTF8') FOR UPDATE");
    const started = performance.now();
    await assert.rejects(p.renewLease('locked', 'a', 60_000), (error: unknown) => {
      assert.ok(error instanceof LeaseTimeoutError, String(error));
      assert.equal(error.outcomeUnknown, false); // the server's own timeout: nothing applied
      assert.ok(['57014', '55P03'].includes(String(error.sqlState)), String(error.sqlState));
      return true;
    });
    assert.ok(performance.now() - started < 1_000);
  } finally {
    await blocker.query('ROLLBACK');
    await blocker.end();
  }
  const other = new pg.Client({ connectionString: pooled });
  await other.connect();
  try {
    for (let i = 0; i < 10; i++) {
      const shown = await other.query('SHOW statement_timeout');
      assert.equal((shown.rows[0] as { statement_timeout: string }).statement_timeout, '0');
    }
  } finally {
    await other.end();
  }
});

async function delivered(ps: PostgresPubSub): Promise<number> {
  const got: Event[] = [];
  const topic = `t-${Math.random().toString(36).slice(2)}`;
  await ps.subscribe(topic, async (event, ack) => {
    got.push(event);
    await ack?.();
  });
  const started = performance.now();
  await ps.publish(topic, { type: 'e', runId: 'r', data: { text: "it's \\ fine" } });
  await until('the event', () => got.length === 1);
  assert.deepEqual(got[0]?.data, { text: "it's \\ fine" });
  return performance.now() - started;
}

test('the PubSub behind transaction pooling polls, and says so; with a direct listenConnectionString it is woken', async () => {
  const lines: string[] = [];
  const logger = { error: (m: string) => lines.push(`error ${m}`), info: (m: string) => lines.push(`info ${m}`) };
  const polling = new PostgresPubSub({ connectionString: pooled }, { pooler: 'transaction', pollIntervalMs: 200, logger });
  open.push(polling);
  await delivered(polling);
  assert.ok(lines.some((l) => l.startsWith('info') && /no LISTEN/.test(l)), lines.join('\n'));
  assert.ok(!lines.some((l) => l.startsWith('error')), lines.join('\n'));
  const woken = new PostgresPubSub(
    { connectionString: pooled },
    { pooler: 'transaction', pollIntervalMs: 60_000, listenConnectionString: db.url, logger },
  );
  open.push(woken);
  assert.ok((await delivered(woken)) < 30_000);
});
