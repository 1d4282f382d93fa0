/**
 * Failures are typed `LeaseError`s and never hang: an unreachable server, a missing table, a
 * statement stuck behind a row lock (server-side timeout on the provider's own pool, client-side
 * deadline on a caller's pool), and a closed provider.
 */

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import pg from 'pg';

import {
  LeaseConnectionError,
  LeaseDatabaseError,
  LeaseError,
  LeaseSchemaError,
  LeaseTimeoutError,
  PostgresLeaseProvider,
} from '../src/index.js';
import { createDatabase, sleep, type TestDatabase } from './helpers.js';

let db: TestDatabase;

before(async () => {
  db = await createDatabase();
});

after(async () => {
  await db.drop();
});

test('an unreachable server is a LeaseConnectionError that never shows the password', async () => {
  const provider = new PostgresLeaseProvider(
    { connectionString: 'postgresql://someone:sekrit-pw@127.0.0.1:1/none' },
    { timeoutMs: 3_000 },
  );
  try {
    for (const call of [() => provider.acquireLease('k', 'o', 1_000), () => provider.getLeaseOwner('k')]) {
      await assert.rejects(call(), (error: unknown) => {
        assert.ok(error instanceof LeaseConnectionError, String(error));
        assert.ok(error instanceof LeaseDatabaseError && error instanceof LeaseError);
        assert.ok(!error.message.includes('sekrit'), error.message);
        assert.ok(error.message.includes('127.0.0.1:1'), error.message);
        assert.ok(error.cause !== undefined);
        return true;
      });
    }
  } finally {
    await provider.close();
  }
});

test('a missing table is a LeaseSchemaError that says how to migrate', async () => {
  const provider = new PostgresLeaseProvider({ connectionString: db.url }, { table: 'not_migrated' });
  try {
    await assert.rejects(provider.acquireLease('k', 'o', 1_000), (error: unknown) => {
      assert.ok(error instanceof LeaseSchemaError, String(error));
      assert.equal(error.sqlState, '42P01');
      assert.match(error.message, /sql-lease migrate/);
      return true;
    });
  } finally {
    await provider.close();
  }
});

/** Make `key` expired and hold its row lock in an open transaction until `release()`. */
async function lockRow(key: string): Promise<{ release(): Promise<void> }> {
  const setup = new PostgresLeaseProvider({ connectionString: db.url });
  await setup.acquireLease(key, 'old', 1);
  await setup.close();
  await sleep(20);
  const locker = await db.client();
  await locker.query('BEGIN');
  const locked = await locker.query('SELECT 1 FROM leases WHERE key = $1 FOR UPDATE', [Buffer.from(key)]);
  assert.equal(locked.rowCount, 1);
  return {
    async release() {
      await locker.query('ROLLBACK');
      await locker.end();
    },
  };
}

test("a statement stuck behind a lock is cancelled by the server on the provider's own pool", async () => {
  const lock = await lockRow('locked-own');
  const provider = new PostgresLeaseProvider({ connectionString: db.url }, { timeoutMs: 1_000 });
  try {
    await assert.rejects(provider.acquireLease('locked-own', 'b', 30_000), (error: unknown) => {
      assert.ok(error instanceof LeaseTimeoutError, `${String(error)} ${(error as Error).stack}`);
      assert.ok(['57014', '55P03'].includes(error.sqlState ?? ''), error.sqlState); // nothing applied
      assert.equal(error.outcomeUnknown, false);
      return true;
    });
  } finally {
    await lock.release();
  }
  const after = await provider.acquireLease('locked-own', 'b', 30_000);
  assert.ok(after.acquired);
  await provider.close();
});

test("on a caller's pool the client-side deadline ends a stuck call and drops its connection", async () => {
  const lock = await lockRow('locked-caller');
  const pool = new pg.Pool({ connectionString: db.url, max: 2 }); // no server-side timeouts
  const provider = new PostgresLeaseProvider({ pool }, { timeoutMs: 500 });
  try {
    await assert.rejects(provider.acquireLease('locked-caller', 'b', 30_000), (error: unknown) => {
      assert.ok(error instanceof LeaseTimeoutError, String(error));
      assert.equal(error.operation, 'acquireLease');
      assert.equal(error.outcomeUnknown, true); // the statement was sent
      return true;
    });
    // The provider also asked the server to cancel the abandoned statement: no backend is
    // left waiting for the lock (polled, bounded).
    const watcher = await db.client();
    try {
      const waiting = async (): Promise<number> =>
        Number(
          (
            await watcher.query(
              "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
          ).rows[0].n,
        );
      for (let i = 0; i < 100 && (await waiting()) > 0; i++) await sleep(50);
      assert.equal(await waiting(), 0, 'the abandoned statement still waits for the lock');
    } finally {
      await watcher.end();
    }
    // The dropped connection freed its slot, and reads do not wait for row locks: it answers.
    assert.equal(await provider.getLeaseOwner('locked-caller'), undefined);
  } finally {
    await lock.release();
  }
  await provider.close();
  // The caller's pool is the caller's: close() left it usable.
  assert.equal((await pool.query('SELECT 1 AS one')).rows[0].one, 1);
  await pool.end();
});

test('a closed provider rejects calls with a LeaseError; close is idempotent', async () => {
  const provider = new PostgresLeaseProvider({ connectionString: db.url });
  assert.equal(await provider.getLeaseOwner('k'), undefined);
  await provider.close();
  await provider.close();
  await assert.rejects(provider.getLeaseOwner('k'), (error: unknown) => error instanceof LeaseError && /closed/.test(String(error)));
});
