/**
 * Counting leases, metadata and all-or-none acquires in `PostgresLeaseProvider` (extensions to
 * Mastra's contract), against a real PostgreSQL, straight and through a real PgBouncer in
 * transaction pooling (`pooler: 'transaction'`): the cases of the Python
 * tests/contract/test_counting.py that the TypeScript API has, and its bad input.
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { isLeaseProvider } from '@mastra/core/events';

import {
  LeaseError,
  LeaseLimitMismatchError,
  LeaseRangeError,
  LeaseTypeError,
  MAX_KEYS,
  MAX_LIMIT,
  MAX_METADATA_BYTES,
  PostgresLeaseProvider,
} from '../src/index.js';
import { createDatabase, sleep, type TestDatabase } from './helpers.js';
import { startPgBouncer, type Bouncer } from './pgbouncer.js';

const LONG = 30_000;
const SHORT = 150;

let db: TestDatabase;
let bouncer: Bouncer;
const open: PostgresLeaseProvider[] = [];

before(async () => {
  db = await createDatabase();
  bouncer = await startPgBouncer('transaction', 8);
});

after(async () => {
  await Promise.all(open.map((p) => p.close()));
  await bouncer.stop();
  await db.drop();
});

const modes = [
  { name: 'direct', make: () => new PostgresLeaseProvider({ connectionString: db.url }, { timeoutMs: 10_000 }) },
  {
    name: 'through PgBouncer (pooler: transaction)',
    make: () =>
      new PostgresLeaseProvider({ connectionString: bouncer.url(db.name) }, { timeoutMs: 10_000, pooler: 'transaction' as const }),
  },
];

function mismatch(key: string, limit: number, heldLimit: number): (error: unknown) => boolean {
  return (error: unknown) => {
    assert.ok(error instanceof LeaseLimitMismatchError, String(error));
    assert.ok(error instanceof LeaseRangeError && error instanceof LeaseError);
    assert.deepEqual([error.key, error.limit, error.heldLimit], [key, limit, heldLimit]);
    assert.equal(
      error.message,
      `key '${key}' is held with limit=${heldLimit}; this call asked for limit=${limit}: every holder of a key must use the same limit`,
    );
    return true;
  };
}

for (const mode of modes) {
  describe(`counting leases, ${mode.name}`, () => {
    let p: PostgresLeaseProvider;
    let n = 0;
    /** A key of its own for each case (the database is shared by both modes). */
    const fresh = (name: string): string => `${mode.name.slice(0, 6)}:${name}:${++n}`;

    before(() => {
      p = mode.make();
      open.push(p);
    });

    test('the provider with the extra optional arguments is still a Mastra LeaseProvider', () => {
      assert.ok(isLeaseProvider(p));
    });

    test('limit 3 admits exactly three, lists them oldest first, and a released slot is taken', async () => {
      const key = fresh('sem');
      const got = [];
      for (const owner of ['a', 'b', 'c']) got.push(await p.acquireFencedLease(key, owner, LONG, { limit: 3 }));
      assert.deepEqual(
        got.map((r) => [r.acquired, r.owner]),
        [
          [true, 'a'],
          [true, 'b'],
          [true, 'c'],
        ],
      );
      assert.ok(got[0]!.fence < got[1]!.fence && got[1]!.fence < got[2]!.fence, 'fences strictly increase across grants');
      // The fourth is refused and told the holder whose grant ends first.
      await p.renewLease(key, 'a', LONG + 5_000);
      const refused = await p.acquireFencedLease(key, 'd', LONG, { limit: 3 });
      assert.deepEqual([refused.acquired, refused.owner, refused.fence], [false, 'b', got[1]!.fence]);
      const holders = await p.getLeaseHolders(key);
      assert.deepEqual(
        holders.map((h) => [h.key, h.owner, h.fence]),
        got.map((r) => [key, r.owner, r.fence]),
      );
      assert.equal(await p.getLeaseOwner(key), 'a', 'a counting key names its oldest holder');
      assert.equal((await p.getLease(key))?.fence, got[0]!.fence);
      // The same owner again renews its grant: its fence stays.
      const again = await p.acquireFencedLease(key, 'c', LONG, { limit: 3 });
      assert.deepEqual([again.acquired, again.fence], [true, got[2]!.fence]);
      // A released slot is taken, with a newer fence.
      await p.releaseLease(key, 'b');
      assert.deepEqual(
        (await p.getLeaseHolders(key)).map((h) => h.owner),
        ['a', 'c'],
      );
      const taken = await p.acquireFencedLease(key, 'd', LONG, { limit: 3 });
      assert.ok(taken.acquired && taken.fence > got[2]!.fence);
      assert.equal((await p.acquireLease(key, 'e', LONG, { limit: 3 })).acquired, false);
    });

    test('release, renew and transfer work per owner; a transfer to a holder is refused', async () => {
      const key = fresh('per-owner');
      await p.acquireLease(key, 'a', LONG, { limit: 2 });
      await p.acquireLease(key, 'b', LONG, { limit: 2 });
      const renewed = await p.renew(key, 'a', LONG);
      assert.ok(renewed !== undefined);
      assert.equal(await p.renewLease(key, 'z', LONG), false);
      assert.equal(await p.transferLease(key, 'a', 'b', LONG), false, 'b already holds a grant');
      const moved = await p.transfer(key, 'a', 'c', LONG);
      assert.ok(moved !== undefined && moved.fence > renewed.fence);
      const holders = await p.getLeaseHolders(key);
      assert.deepEqual(
        holders.map((h) => h.owner),
        ['b', 'c'],
      );
      assert.equal(holders[1]!.fence, moved.fence);
      const released = await p.release(key, 'c');
      assert.equal(released?.fence, moved.fence);
      assert.ok(released.at instanceof Date);
      assert.equal(await p.release(key, 'c'), undefined);
      await p.releaseLease(key, 'b');
      assert.deepEqual(await p.getLeaseHolders(key), []);
      assert.equal(await p.getLeaseOwner(key), undefined);
      assert.equal(await p.getLease(key), undefined);
    });

    test('expired grants free their slots', async () => {
      const key = fresh('expiry');
      await p.acquireLease(key, 'a', SHORT, { limit: 2 });
      await p.acquireLease(key, 'b', LONG, { limit: 2 });
      assert.equal((await p.acquireLease(key, 'c', LONG, { limit: 2 })).acquired, false);
      await sleep(SHORT * 2);
      assert.deepEqual(
        (await p.getLeaseHolders(key)).map((h) => h.owner),
        ['b'],
      );
      assert.equal((await p.acquireLease(key, 'c', LONG, { limit: 2 })).acquired, true);
      assert.equal(await p.renewLease(key, 'a', LONG), false, 'an expired grant is lost');
    });

    test('mixing limits is refused clearly and changes nothing; once free any limit may take the key', async () => {
      const key = fresh('mix');
      await p.acquireLease(key, 'a', SHORT * 2, { limit: 3 });
      await assert.rejects(p.acquireLease(key, 'b', LONG, { limit: 2 }), mismatch(key, 2, 3));
      await assert.rejects(p.acquireLease(key, 'b', LONG), mismatch(key, 1, 3));
      await assert.rejects(p.acquireLease(key, 'a', LONG, { limit: 1 }), mismatch(key, 1, 3));
      assert.deepEqual(
        (await p.getLeaseHolders(key)).map((h) => h.owner),
        ['a'],
      );
      const plain = fresh('mix-plain');
      await p.acquireLease(plain, 'a', LONG);
      await assert.rejects(p.acquireLease(plain, 'b', LONG, { limit: 2 }), mismatch(plain, 2, 1));
      await assert.rejects(p.acquireLease(plain, 'a', LONG, { limit: 2 }), mismatch(plain, 2, 1));
      assert.equal(await p.getLeaseOwner(plain), 'a');
      await sleep(SHORT * 3);
      assert.equal((await p.acquireLease(key, 'b', LONG, { limit: 2 })).acquired, true);
    });

    test('metadata round-trips through getLease and the holders, replaced when given, kept on transfer', async () => {
      const key = fresh('meta');
      const first = await p.acquireFencedLease(key, 'a', LONG, { metadata: '{"host": "web-3"}' });
      assert.ok(first.acquired);
      let lease = await p.getLease(key);
      assert.deepEqual([lease?.owner, lease?.fence, lease?.metadata], ['a', first.fence, '{"host": "web-3"}']);
      assert.equal((await p.acquireLease(key, 'b', LONG)).acquired, false, 'a lease with metadata is still one owner');
      assert.equal((await p.acquireLease(key, 'b', LONG)).owner, 'a');
      // Re-acquired with other metadata: replaced, fence kept; bytes come back as a Buffer.
      const bytes = Buffer.from([0, 255, 1, 0xfe]);
      const again = await p.acquireFencedLease(key, 'a', LONG, { metadata: bytes });
      assert.equal(again.fence, first.fence);
      lease = await p.getLease(key);
      assert.ok(Buffer.isBuffer(lease?.metadata) && lease.metadata.equals(bytes));
      // Re-acquired without metadata: kept.
      assert.ok((await p.acquireLease(key, 'a', LONG)).acquired);
      assert.ok(Buffer.isBuffer((await p.getLease(key))?.metadata));
      // A transfer keeps it, or replaces it when given.
      assert.ok(await p.transferLease(key, 'a', 'b', LONG));
      lease = await p.getLease(key);
      assert.ok(lease?.owner === 'b' && Buffer.isBuffer(lease.metadata) && lease.metadata.equals(bytes));
      assert.ok(await p.transferLease(key, 'b', 'c', LONG, { metadata: 'handed over \ud800' }));
      assert.deepEqual([(await p.getLease(key))?.owner, (await p.getLease(key))?.metadata], ['c', 'handed over \ud800']);
      // With a limit, each grant its own.
      const sem = fresh('meta-sem');
      await p.acquireLease(sem, 'x', LONG, { limit: 2, metadata: 'one' });
      await p.acquireLease(sem, 'y', LONG, { limit: 2, metadata: new Uint8Array([7]) });
      const holders = await p.getLeaseHolders(sem);
      assert.equal(holders[0]!.metadata, 'one');
      assert.deepEqual(holders[1]!.metadata, Buffer.from([7]));
      // A transfer with metadata of a plain lease turns it into one with metadata.
      const plain = fresh('meta-plain');
      await p.acquireLease(plain, 'a', LONG);
      assert.equal((await p.getLease(plain))?.metadata, undefined);
      assert.equal('metadata' in (await p.getLease(plain))!, false, 'a plain lease has no metadata property');
      assert.ok(await p.transferLease(plain, 'a', 'b', LONG, { metadata: 'now' }));
      assert.deepEqual([(await p.getLease(plain))?.owner, (await p.getLease(plain))?.metadata], ['b', 'now']);
      // The largest metadata is taken whole.
      const big = fresh('meta-big');
      await p.acquireLease(big, 'a', LONG, { metadata: 'é'.repeat(MAX_METADATA_BYTES / 2) });
      assert.equal((await p.getLease(big))?.metadata, 'é'.repeat(MAX_METADATA_BYTES / 2));
    });

    test('all or none: one held key takes none and names it; all free takes all; releaseLeases counts', async () => {
      const [a, b, c] = [fresh('all-a'), fresh('all-b'), fresh('all-c')];
      await p.acquireLease(b, 'other', LONG);
      const refused = await p.acquireLeases([c, b, a], 'me', LONG);
      assert.deepEqual(refused, { acquired: false, leases: new Map(), blockedKey: b, blockedBy: 'other' });
      assert.equal(await p.getLeaseOwner(a), undefined);
      assert.equal(await p.getLeaseOwner(c), undefined);
      await p.releaseLease(b, 'other');
      const taken = await p.acquireLeases(new Set([c, b, a, a]), 'me', LONG);
      assert.equal(taken.acquired, true);
      assert.deepEqual([...taken.leases.keys()].sort(), [a, b, c].sort());
      for (const key of [a, b, c]) {
        const lease = await p.getLease(key);
        assert.deepEqual([lease?.owner, lease?.fence], ['me', taken.leases.get(key)?.fence]);
      }
      // Again by the same owner: renewed, fences kept.
      const again = await p.acquireLeases([a, b, c], 'me', LONG);
      assert.equal(again.acquired, true);
      for (const key of [a, b, c]) assert.equal(again.leases.get(key)?.fence, taken.leases.get(key)?.fence);
      // A counting key blocks too, named by its oldest holder.
      const sem = fresh('all-sem');
      await p.acquireLease(sem, 's1', LONG, { limit: 2 });
      const blocked = await p.acquireLeases([a, sem], 'me', LONG);
      assert.deepEqual([blocked.acquired, blocked.blockedKey, blocked.blockedBy], [false, sem, 's1']);
      assert.equal(await p.releaseLeases([a, b, c, sem], 'me'), 3);
      assert.equal(await p.releaseLeases([a, b, c], 'me'), 0);
      assert.deepEqual(
        (await p.getLeaseHolders(sem)).map((h) => h.owner),
        ['s1'],
      );
    });

    test('racing acquirers on separate connections never exceed the limit', async () => {
      const key = fresh('race');
      const racers = Array.from({ length: 4 }, () => mode.make());
      open.push(...racers);
      const results = await Promise.all(
        Array.from({ length: 12 }, (_, i) => racers[i % racers.length]!.acquireFencedLease(key, `w${i}`, LONG, { limit: 3 })),
      );
      const won = results.filter((r) => r.acquired);
      assert.equal(won.length, 3, JSON.stringify(results.map((r) => [r.acquired, r.owner])));
      assert.equal(new Set(won.map((r) => r.fence)).size, 3);
      assert.deepEqual(
        (await p.getLeaseHolders(key)).map((h) => h.owner).sort(),
        won.map((r) => r.owner).sort(),
      );
      for (const r of results.filter((x) => !x.acquired)) assert.ok(won.some((w) => w.owner === r.owner));
    });
  });
}

describe('bad input: a clear error before any I/O (the provider points at no server)', () => {
  const logged: string[] = [];
  const logger = { error: (message: string): void => void logged.push(message) };
  const nowhere = new PostgresLeaseProvider({ connectionString: 'postgresql://postgres@127.0.0.1:1/none' }, { timeoutMs: 500, logger });
  after(async () => {
    await nowhere.close();
    // A refused acquire is logged with its key, as every failed acquire (Mastra treats a throw as won).
    assert.ok(logged.length > 0 && logged.every((line) => line.startsWith('[sql_lease] acquireLease failed for key')));
  });

  test('limit', async () => {
    for (const [bad, kind, words] of [
      [0, LeaseRangeError, /limit must be between 1 and 1000, not 0/],
      [MAX_LIMIT + 1, LeaseRangeError, /not 1001/],
      [-2, LeaseRangeError, /not -2/],
      [1.5, LeaseTypeError, /limit must be an integer, not 1.5/],
      ['3', LeaseTypeError, /not a string/],
      [null, LeaseTypeError, /not null/],
      [Number.NaN, LeaseTypeError, /not NaN/],
    ] as const) {
      await assert.rejects(p0().acquireLease('k', 'o', LONG, { limit: bad as never }), (error: unknown) => {
        assert.ok(error instanceof kind, `${String(bad)}: ${String(error)}`);
        assert.match((error as Error).message, words);
        return true;
      });
    }
  });

  test('metadata', async () => {
    await assert.rejects(
      p0().acquireLease('k', 'o', LONG, { metadata: 'x'.repeat(MAX_METADATA_BYTES + 1) }),
      (error: unknown) => error instanceof LeaseRangeError && /metadata is 1025 bytes; the limit is 1024/.test(error.message),
    );
    await assert.rejects(
      p0().acquireLease('k', 'o', LONG, { metadata: 'é'.repeat(513) }),
      (error: unknown) => error instanceof LeaseRangeError && /1026 bytes/.test(error.message),
    );
    for (const bad of [1, {}, ['a'], true]) {
      await assert.rejects(
        p0().acquireLease('k', 'o', LONG, { metadata: bad as never }),
        (error: unknown) => error instanceof LeaseTypeError && /metadata must be a string, a Buffer or a Uint8Array/.test(error.message),
      );
      await assert.rejects(p0().transferLease('k', 'a', 'b', LONG, { metadata: bad as never }), LeaseTypeError);
    }
    await assert.rejects(p0().acquireLease('k', 'o', LONG, null as never), /options must be an object/);
    await assert.rejects(p0().acquireLease('k', 'o', LONG, 3 as never), /options must be an object/);
    // The key, owner and TTL are checked first, as the plain call checks them.
    await assert.rejects(p0().acquireLease('', 'o', LONG, { limit: 0 }), /key must not be empty/);
    await assert.rejects(p0().acquireLease('k', 'o', 0, { limit: 0 }), /ttlMs must be between/);
  });

  test('keys of all-or-none calls', async () => {
    const cases: [unknown, typeof LeaseTypeError | typeof LeaseRangeError, RegExp][] = [
      ['abc', LeaseTypeError, /keys must be an array \(or another iterable\) of strings, not a string/],
      [undefined, LeaseTypeError, /not a undefined/],
      [[], LeaseRangeError, /keys must not be empty/],
      [['a', 1], LeaseTypeError, /key must be a string, not a number/],
      [['a', ''], LeaseRangeError, /key must not be empty/],
      [Array.from({ length: MAX_KEYS + 1 }, (_, i) => `k${i}`), LeaseRangeError, /at most 1000 keys at once, not 1001/],
    ];
    for (const [keys, kind, words] of cases) {
      await assert.rejects(p0().acquireLeases(keys as never, 'o', LONG), (error: unknown) => {
        assert.ok(error instanceof kind, String(error));
        assert.match((error as Error).message, words);
        return true;
      });
      await assert.rejects(p0().releaseLeases(keys as never, 'o'), kind);
    }
    await assert.rejects(p0().acquireLeases(['a'], '', LONG), /owner must not be empty/);
    await assert.rejects(p0().acquireLeases(['a'], 'o', 1.5), /ttlMs must be an integer/);
    // 1000 keys, repeated, are taken as the 1000 they are (the check, then the connection fails).
    const many = Array.from({ length: MAX_KEYS }, (_, i) => `k${i}`);
    await assert.rejects(p0().acquireLeases([...many, ...many], 'o', LONG), (error: unknown) => !(error instanceof LeaseRangeError));
    await assert.rejects(p0().getLeaseHolders(''), /key must not be empty/);
  });

  function p0(): PostgresLeaseProvider {
    return nowhere;
  }
});
