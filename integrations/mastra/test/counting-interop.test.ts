/**
 * Counting leases across the two languages, on one leases table: rows the Python library
 * wrote (counting leases, leases with metadata) met by this package's plain contract calls,
 * which must behave exactly as Python's plain calls do (the miss-path fall-through of
 * `sql_lease._sqlprovider.counting`; mixing limits refused with the same error and words;
 * the reserved owner never read as a name); counting leases, metadata and all-or-none
 * acquires taken in one language seen by the other; and plain calls on a table from before
 * migration 0009 (a rolling upgrade) unchanged.
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import pg from 'pg';

import { LeaseLimitMismatchError, LeaseSchemaError, PostgresLeaseProvider } from '../src/index.js';
import { alembic, createDatabase, PACKAGE_DIR, python, type TestDatabase } from './helpers.js';

const PEER = `${PACKAGE_DIR}test/py/counting_peer.py`;
const LONG = 60_000;

interface PyLease {
  key: string;
  owner: string;
  fence: string;
  expires_at: number;
  acquired_at: number;
  metadata: string | { hex: string } | null;
}
interface PyAcquire {
  acquired: boolean;
  owner: string;
  fence: string;
}
interface PyError {
  error: string;
  message: string;
}

let db: TestDatabase;
let p: PostgresLeaseProvider;
const logged: string[] = [];

before(async () => {
  db = await createDatabase();
  p = new PostgresLeaseProvider({ connectionString: db.url }, { timeoutMs: 10_000, logger: { error: (m: string) => void logged.push(m) } });
});

after(async () => {
  await p.close();
  await db.drop();
});

type Call = { m: string; a?: unknown[]; kw?: Record<string, unknown> };

/** Run `calls` on a Python `SqlLeaseProvider` of `url` (default: the test database). */
async function py(calls: Call[], url = db.url): Promise<unknown[]> {
  return JSON.parse(await python([PEER, url], JSON.stringify(calls))) as unknown[];
}

const hex = (bytes: Buffer): { hex: string } => ({ hex: bytes.toString('hex') });

describe('plain calls of this package on rows the Python library wrote', () => {
  test('a counting lease (limit 3): the plain calls act per owner, a plain acquire is refused as in Python', async () => {
    const key = 'sem';
    const [a, b, c, holders, plainAcquire] = (await py([
      { m: 'acquire_lease', a: [key, 'py-a', LONG], kw: { limit: 3, metadata: 'alpha' } },
      { m: 'acquire_lease', a: [key, 'py-b', LONG], kw: { limit: 3, metadata: hex(Buffer.from([0, 0xff])) } },
      { m: 'acquire_lease', a: [key, 'py-c', LONG], kw: { limit: 3 } },
      { m: 'get_lease_holders', a: [key] },
      { m: 'acquire_lease', a: [key, 'probe', LONG] },
    ])) as [PyAcquire, PyAcquire, PyAcquire, PyLease[], PyError];
    assert.ok(a.acquired && b.acquired && c.acquired);
    assert.equal(plainAcquire.error, 'LeaseLimitMismatchError');

    // A plain acquire: the same error, the same words; nothing changed.
    for (const acquire of [() => p.acquireLease(key, 'probe', LONG), () => p.acquireFencedLease(key, 'probe', LONG)]) {
      await assert.rejects(acquire(), (error: unknown) => {
        assert.ok(error instanceof LeaseLimitMismatchError);
        assert.equal(error.message, plainAcquire.message);
        assert.deepEqual([error.limit, error.heldLimit], [1, 3]);
        return true;
      });
    }
    assert.match(logged.at(-1) ?? '', /acquireLease failed for key "sem" \(owner "probe"\): LeaseLimitMismatchError/);

    // Reads name the oldest holder, with its fence and metadata; never the reserved owner.
    assert.equal(await p.getLeaseOwner(key), 'py-a');
    const lease = await p.getLease(key);
    assert.deepEqual([lease?.owner, lease?.fence, lease?.metadata], ['py-a', BigInt(a.fence), 'alpha']);
    const ours = await p.getLeaseHolders(key);
    assert.deepEqual(
      ours.map((h) => [h.owner, String(h.fence), h.expiresAt.getTime(), h.acquiredAt.getTime()]),
      holders.map((h) => [h.owner, h.fence, h.expires_at, h.acquired_at]),
    );
    assert.deepEqual(ours[1]!.metadata, Buffer.from([0, 0xff]));
    assert.equal('metadata' in ours[2]!, false);

    // Renew, transfer and release act on the owner's grant; others' calls miss.
    assert.equal(await p.renewLease(key, 'py-b', LONG), true);
    assert.equal((await p.renew(key, 'py-c', LONG))?.fence, BigInt(c.fence));
    assert.equal(await p.renewLease(key, 'nobody', LONG), false);
    assert.equal(await p.transferLease(key, 'nobody', 'x', LONG), false);
    await p.releaseLease(key, 'nobody');
    assert.equal(await p.release(key, 'nobody'), undefined);
    assert.equal(await p.transferLease(key, 'py-a', 'py-b', LONG), false, 'py-b already holds a grant');
    const moved = await p.transfer(key, 'py-a', 'ts-x', LONG);
    assert.ok(moved !== undefined && moved.fence > BigInt(c.fence));
    await p.releaseLease(key, 'py-b');
    const released = await p.release(key, 'py-c');
    assert.equal(released?.fence, BigInt(c.fence));

    const [after, refusedInPython] = (await py([
      { m: 'get_lease_holders', a: [key] },
      { m: 'acquire_lease', a: [key, 'probe', LONG] },
    ])) as [PyLease[], PyError];
    assert.deepEqual(
      after.map((h) => [h.owner, h.fence, h.metadata]),
      [['ts-x', String(moved.fence), 'alpha']],
      'the transfer kept the grant metadata',
    );
    assert.equal(refusedInPython.message, plainAcquire.message);
  });

  test('a lease with metadata (limit 1): plain acquires are refused naming the holder, its owner renews', async () => {
    const key = 'meta';
    const [first] = (await py([{ m: 'acquire_lease', a: [key, 'py', LONG], kw: { metadata: 'hello' } }])) as [PyAcquire];
    const refused = await p.acquireFencedLease(key, 'ts', LONG);
    assert.deepEqual([refused.acquired, refused.owner, refused.fence], [false, 'py', BigInt(first.fence)]);
    assert.deepEqual(await p.acquireLease(key, 'ts', LONG), { acquired: false, owner: 'py' });
    const renewed = await p.acquireFencedLease(key, 'py', LONG);
    assert.deepEqual([renewed.acquired, renewed.fence], [true, BigInt(first.fence)]);
    const [pyRefused, pyLease] = (await py([
      { m: 'acquire_lease', a: [key, 'other', LONG] },
      { m: 'get_lease', a: [key] },
    ])) as [PyAcquire, PyLease];
    assert.deepEqual([pyRefused.acquired, pyRefused.owner], [false, 'py']);
    assert.deepEqual([pyLease.owner, pyLease.fence, pyLease.metadata], ['py', first.fence, 'hello']);
    assert.equal((await p.getLease(key))?.metadata, 'hello');
    assert.equal(await p.transferLease(key, 'py', 'ts', LONG), true);
    assert.deepEqual([await p.getLeaseOwner(key), (await p.getLease(key))?.metadata], ['ts', 'hello']);
  });

  test('a contended key (read first) that became a counting lease in Python is judged as one', async () => {
    const key = 'contended';
    await py([{ m: 'acquire_lease', a: [key, 'py', LONG] }]);
    assert.equal((await p.acquireLease(key, 'ts', LONG)).acquired, false);
    const reads = p.acquireReads;
    assert.equal((await p.acquireLease(key, 'ts', LONG)).owner, 'py');
    assert.equal(p.acquireReads, reads + 1, 'the key is contended: the holder is read first');
    await py([
      { m: 'release_lease', a: [key, 'py'] },
      { m: 'acquire_lease', a: [key, 'py', LONG], kw: { limit: 2 } },
    ]);
    await assert.rejects(p.acquireLease(key, 'ts', LONG), LeaseLimitMismatchError);
    assert.equal((await p.acquireLease(key, 'ts', LONG, { limit: 2 })).acquired, true);
  });

  test("on a caller's pool with another DateStyle the contract methods answer on a counting row (no time read)", async () => {
    const key = 'datestyle';
    await py([
      { m: 'acquire_lease', a: [key, 'py-a', LONG], kw: { limit: 2, metadata: 'm' } },
      { m: 'acquire_lease', a: [key, 'py-b', LONG], kw: { limit: 2 } },
    ]);
    const pool = new pg.Pool({ connectionString: db.url, options: '-c DateStyle=SQL,DMY' });
    const q = new PostgresLeaseProvider({ pool }, { logger: { error: () => undefined } });
    try {
      assert.equal(await q.getLeaseOwner(key), 'py-a');
      assert.equal(await q.renewLease(key, 'py-b', LONG), true);
      assert.equal(await q.transferLease(key, 'py-b', 'ts', LONG), true);
      assert.deepEqual(await q.acquireLease(key, 'ts', LONG, { limit: 2 }), { acquired: true, owner: 'ts' });
      assert.deepEqual(await q.acquireLease(key, 'other', LONG, { limit: 2 }), { acquired: false, owner: 'py-a' });
      await q.releaseLease(key, 'py-a');
      assert.deepEqual(
        (await q.getLeaseHolders(key)).map((h) => h.owner),
        ['ts'],
      );
    } finally {
      await q.close();
      await pool.end();
    }
  });
});

describe('counting leases and all-or-none from one language, seen by the other', () => {
  test('a counting lease taken here is listed by Python, and the reverse', async () => {
    const key = 'from-ts';
    const x = await p.acquireFencedLease(key, 'ts-a', LONG, { limit: 2, metadata: Buffer.from('bytes\0') });
    const y = await p.acquireFencedLease(key, 'ts-b', LONG, { limit: 2, metadata: 'str \u00e9' });
    const [holders, plain, refused] = (await py([
      { m: 'get_lease_holders', a: [key] },
      { m: 'acquire_lease', a: [key, 'py', LONG] },
      { m: 'acquire_lease', a: [key, 'py', LONG], kw: { limit: 2 } },
    ])) as [PyLease[], PyError, PyAcquire];
    assert.deepEqual(
      holders.map((h) => [h.owner, h.fence, h.expires_at, h.metadata]),
      [
        ['ts-a', String(x.fence), x.expiresAt.getTime(), hex(Buffer.from('bytes\0'))],
        ['ts-b', String(y.fence), y.expiresAt.getTime(), 'str \u00e9'],
      ],
    );
    assert.equal(plain.error, 'LeaseLimitMismatchError');
    assert.deepEqual([refused.acquired, refused.owner], [false, 'ts-a']);

    const back = 'from-py';
    const [first, second] = (await py([
      { m: 'acquire_lease', a: [back, 'py-1', LONG], kw: { limit: 2, metadata: 'one' } },
      { m: 'acquire_lease', a: [back, 'py-2', LONG], kw: { limit: 2 } },
    ])) as [PyAcquire, PyAcquire];
    const ours = await p.getLeaseHolders(back);
    assert.deepEqual(
      ours.map((h) => [h.owner, String(h.fence), h.metadata]),
      [
        ['py-1', first.fence, 'one'],
        ['py-2', second.fence, undefined],
      ],
    );
    assert.equal((await p.acquireLease(back, 'ts', LONG, { limit: 2 })).owner, 'py-1');
    await p.releaseLease(back, 'py-1');
    assert.equal((await p.acquireLease(back, 'ts', LONG, { limit: 2 })).acquired, true);
    const [now] = (await py([{ m: 'get_lease_holders', a: [back] }])) as [PyLease[]];
    assert.deepEqual(
      now.map((h) => h.owner),
      ['py-2', 'ts'],
    );
  });

  test('all-or-none acquires block each other across languages', async () => {
    const keys = ['all:x', 'all:y', 'all:z'];
    const taken = await p.acquireLeases(keys, 'ts', LONG);
    assert.equal(taken.acquired, true);
    const [blocked] = (await py([{ m: 'acquire_leases', a: [['all:y', 'all:x'], 'py', LONG] }])) as [
      { acquired: boolean; blocked_key: string; blocked_by: string },
    ];
    assert.deepEqual([blocked.acquired, blocked.blocked_key, blocked.blocked_by], [false, 'all:x', 'ts']);
    assert.equal(await p.releaseLeases(keys, 'ts'), 3);
    const [won, released] = (await py([
      { m: 'acquire_leases', a: [keys, 'py', LONG] },
      { m: 'release_leases', a: [['all:z'], 'py'] },
    ])) as [{ acquired: boolean; leases: Record<string, PyAcquire> }, string];
    assert.equal(won.acquired, true);
    assert.equal(released, '1');
    assert.equal(await p.getLeaseOwner('all:x'), 'py');
    assert.equal((await p.getLease('all:y'))?.fence, BigInt(won.leases['all:y']!.fence));
    const refused = await p.acquireLeases(['all:z', 'all:y'], 'ts', LONG);
    assert.deepEqual(refused, { acquired: false, leases: new Map(), blockedKey: 'all:y', blockedBy: 'py' });
    assert.equal(await p.getLeaseOwner('all:z'), undefined, 'a refused all-or-none acquire took nothing');
  });

  test('the bounds and their words are the Python ones', async () => {
    const calls: [Call, () => Promise<unknown>][] = [
      [{ m: 'acquire_lease', a: ['k', 'o', LONG], kw: { limit: 0 } }, () => p.acquireLease('k', 'o', LONG, { limit: 0 })],
      [{ m: 'acquire_lease', a: ['k', 'o', LONG], kw: { limit: 1001 } }, () => p.acquireLease('k', 'o', LONG, { limit: 1001 })],
      [
        { m: 'acquire_lease', a: ['k', 'o', LONG], kw: { metadata: 'x'.repeat(1025) } },
        () => p.acquireLease('k', 'o', LONG, { metadata: 'x'.repeat(1025) }),
      ],
      [{ m: 'acquire_leases', a: [[], 'o', LONG] }, () => p.acquireLeases([], 'o', LONG)],
      [
        { m: 'acquire_leases', a: [Array.from({ length: 1001 }, (_, i) => `k${i}`), 'o', LONG] },
        () => p.acquireLeases(Array.from({ length: 1001 }, (_, i) => `k${i}`), 'o', LONG),
      ],
    ];
    const theirs = (await py(calls.map(([call]) => call))) as PyError[];
    for (const [i, [, ours]] of calls.entries()) {
      await assert.rejects(ours(), (error: unknown) => {
        assert.equal((error as Error).message, theirs[i]!.message);
        return true;
      });
    }
  });
});

test('on a table from before migration 0009 the plain calls are unchanged, counting calls say what to run', async () => {
  const old = await createDatabase();
  const q = new PostgresLeaseProvider({ connectionString: old.url }, { timeoutMs: 10_000 });
  try {
    await alembic(old.url, ['downgrade', '0006']);
    assert.equal((await q.acquireLease('k', 'a', LONG)).acquired, true);
    assert.equal(await q.renewLease('k', 'b', LONG), false);
    assert.equal(await q.renew('k', 'b', LONG), undefined);
    assert.equal(await q.transferLease('k', 'b', 'c', LONG), false);
    await q.releaseLease('k', 'b');
    assert.equal(await q.release('k', 'b'), undefined);
    assert.equal(await q.getLeaseOwner('k'), 'a');
    assert.equal(await q.transferLease('k', 'a', 'c', LONG), true);
    await q.releaseLease('k', 'c');
    assert.equal(await q.getLeaseOwner('k'), undefined);
    await assert.rejects(q.acquireLease('s', 'a', LONG, { limit: 2 }), (error: unknown) => {
      assert.ok(error instanceof LeaseSchemaError, String(error));
      assert.match(error.message, /apply the migrations/);
      return true;
    });
  } finally {
    await q.close();
    await old.drop();
  }
});
