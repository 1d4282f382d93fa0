/**
 * The read-first contention hint (src/contention.ts, as the Python provider's `_contention`):
 * after an acquire saw a key held by another owner, acquires of that key first run the cheap
 * holder read, and only run the full statement when the key looks free or the caller's own.
 * Statements are counted as pool checkouts (one per statement) on a pool the test owns.
 */

import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';

import pg from 'pg';

import { PostgresLeaseProvider } from '../src/index.js';
import { HINT_MS } from '../src/contention.js';
import { createDatabase, sleep, type TestDatabase } from './helpers.js';

const LONG = 30_000;

let db: TestDatabase;
let pool: pg.Pool;
let provider: PostgresLeaseProvider;
let statements = 0;

before(async () => {
  db = await createDatabase();
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
  pool.on('acquire', () => statements++);
  provider = new PostgresLeaseProvider({ pool });
});

after(async () => {
  await provider.close();
  await pool.end();
  await db.drop();
});

beforeEach(() => db.truncate());

/** What `fn` cost: statements run and acquires answered by the read alone. */
async function cost<T>(fn: () => Promise<T>): Promise<{ result: T; statements: number; reads: number }> {
  const [s, r] = [statements, provider.acquireReads];
  const result = await fn();
  return { result, statements: statements - s, reads: provider.acquireReads - r };
}

test('a held key: the first failed acquire runs the full statement, the next ones only the holder read', async () => {
  const won = await provider.acquireFencedLease('hot', 'a', LONG);
  assert.equal(won.acquired, true);
  const first = await cost(() => provider.acquireFencedLease('hot', 'b', LONG));
  assert.deepEqual([first.result.acquired, first.result.owner, first.statements, first.reads], [false, 'a', 1, 0]);
  for (let i = 0; i < 3; i++) {
    const next = await cost(() => provider.acquireFencedLease('hot', 'b', LONG));
    assert.deepEqual([next.result.acquired, next.result.owner, next.statements, next.reads], [false, 'a', 1, 1]);
    assert.equal(next.result.fence, won.fence, 'the read names the holder with its fence');
    assert.ok(next.result.expiresAt instanceof Date);
  }
  // Other keys have no hint: one statement each.
  const other = await cost(() => provider.acquireFencedLease('cold', 'b', LONG));
  assert.deepEqual([other.result.acquired, other.statements, other.reads], [true, 1, 0]);
});

test('a contended key that became free is won: the read finds no holder, the full statement runs', async () => {
  await provider.acquireFencedLease('k', 'a', LONG);
  assert.equal((await provider.acquireFencedLease('k', 'b', LONG)).acquired, false);
  await provider.releaseLease('k', 'a');
  const taken = await cost(() => provider.acquireFencedLease('k', 'b', LONG));
  assert.deepEqual([taken.result.acquired, taken.result.owner, taken.statements, taken.reads], [true, 'b', 2, 0]);
  assert.equal(await provider.getLeaseOwner('k'), 'b');
  // Won: the hint is gone, so the next acquire by the new holder is one statement.
  const again = await cost(() => provider.acquireFencedLease('k', 'b', LONG));
  assert.deepEqual([again.result.acquired, again.statements], [true, 1]);
});

test("the holder re-acquiring a key its provider saw contended keeps its fence (the read sees its own lease)", async () => {
  const won = await provider.acquireFencedLease('k', 'a', LONG);
  assert.equal((await provider.acquireFencedLease('k', 'b', LONG)).acquired, false);
  const mine = await cost(() => provider.acquireFencedLease('k', 'a', LONG));
  assert.deepEqual([mine.result.acquired, mine.result.fence, mine.statements, mine.reads], [true, won.fence, 2, 0]);
});

test('the hint lapses after HINT_MS: a failed acquire runs the full statement again', async () => {
  await provider.acquireFencedLease('k', 'a', LONG);
  assert.equal((await provider.acquireFencedLease('k', 'b', LONG)).acquired, false);
  await sleep(HINT_MS + 50);
  const late = await cost(() => provider.acquireFencedLease('k', 'b', LONG));
  assert.deepEqual([late.result.acquired, late.result.owner, late.statements, late.reads], [false, 'a', 1, 0]);
});
