/**
 * The contract suite (SPEC §3 row by row, and §4's bad input), mirroring the Python
 * tests/contract/test_semantics.py and test_bad_input.py case for case. With
 * `SQL_LEASE_TS_POOLER=transaction` (contract-pgbouncer.test.ts) the provider runs through a
 * real PgBouncer in transaction pooling, with `pooler: 'transaction'`; with
 * `SQL_LEASE_TS_HOSTS=list` (contract-hosts.test.ts) on a host list whose first host is down.
 */

import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';

import { isLeaseProvider } from '@mastra/core/events';
import pg from 'pg';

import { LeaseError, PostgresLeaseProvider, type Lease } from '../src/index.js';
import { createDatabase, sleep, type TestDatabase } from './helpers.js';
import { startPgBouncer, type Bouncer } from './pgbouncer.js';

const SHORT = 150; // ms: leases that the test lets expire
const WAIT = 300; // ms: comfortably past SHORT
const LONG = 30_000;
const YEAR = 365 * 24 * 3600 * 1000;

let db: TestDatabase;
let provider: PostgresLeaseProvider;
/** What the provider logged at error level. */
const logged: string[] = [];
const logger = { error: (message: string): void => void logged.push(message) };
let bouncer: Bouncer | undefined;
const POOLED = process.env.SQL_LEASE_TS_POOLER === 'transaction';
/** contract-hosts.test.ts: a host list whose first host is down, with target_session_attrs. */
const HOSTS = process.env.SQL_LEASE_TS_HOSTS === 'list';

const expire = (): Promise<void> => sleep(WAIT);

function near(when: Date | undefined, ms: number, slackMs = 2_000): void {
  assert.ok(when instanceof Date);
  const delta = when.getTime() - Date.now();
  assert.ok(ms - slackMs <= delta && delta <= ms + slackMs, `${delta} ms is not near ${ms} ms`);
}

async function lease(key: string): Promise<Lease> {
  const found = await provider.getLease(key);
  assert.ok(found, `no live lease on ${JSON.stringify(key)}`);
  return found;
}

before(async () => {
  db = await createDatabase();
  if (POOLED) {
    bouncer = await startPgBouncer('transaction');
    const url = bouncer.url(db.name);
    provider = new PostgresLeaseProvider({ connectionString: url }, { timeoutMs: 10_000, pooler: 'transaction', logger });
  } else if (HOSTS) {
    const url = new URL(db.url);
    const list = `postgresql://${url.username}@127.0.0.1:1,${url.host}${url.pathname}?target_session_attrs=read-write`;
    provider = new PostgresLeaseProvider({ connectionString: list }, { timeoutMs: 10_000, logger });
  } else {
    provider = new PostgresLeaseProvider({ connectionString: db.url }, { timeoutMs: 10_000, logger });
  }
});

after(async () => {
  await provider.close();
  await bouncer?.stop();
  await db.drop();
});

beforeEach(() => db.truncate());

describe('semantics', () => {
  test('the provider is a Mastra LeaseProvider', () => {
    assert.equal(isLeaseProvider(provider), true);
  });

  test('acquireLease answers exactly the contract shape { acquired, owner }', async () => {
    assert.deepEqual(await provider.acquireLease('k', 'owner-a', LONG), { acquired: true, owner: 'owner-a' });
    assert.deepEqual(await provider.acquireLease('k', 'owner-a', LONG), { acquired: true, owner: 'owner-a' });
    assert.deepEqual(await provider.acquireLease('k', 'owner-b', LONG), { acquired: false, owner: 'owner-a' });
    const fenced = await provider.acquireFencedLease('k', 'owner-b', LONG);
    assert.deepEqual(Object.keys(fenced).sort(), ['acquired', 'expiresAt', 'fence', 'owner']);
  });

  test('acquire of a free key wins with a fence and database expiry', async () => {
    const result = await provider.acquireFencedLease('k', 'a', LONG);
    assert.equal(result.acquired, true);
    assert.equal(result.owner, 'a');
    assert.equal(typeof result.fence, 'bigint');
    near(result.expiresAt, LONG);
    assert.equal(await provider.getLeaseOwner('k'), 'a');
  });

  test('acquire of an expired key wins with a new fence', async () => {
    const first = await provider.acquireFencedLease('k', 'a', SHORT);
    await expire();
    const second = await provider.acquireFencedLease('k', 'b', LONG);
    assert.ok(second.acquired && second.owner === 'b');
    assert.ok(second.fence > first.fence);
  });

  test('re-acquire by the holder resets the expiry and keeps the fence', async () => {
    const first = await provider.acquireFencedLease('k', 'a', 2_000);
    const again = await provider.acquireFencedLease('k', 'a', LONG);
    assert.ok(again.acquired && again.owner === 'a');
    assert.equal(again.fence, first.fence);
    assert.ok(again.expiresAt > first.expiresAt);
    assert.ok((await lease('k')).acquiredAt <= first.expiresAt);
  });

  test('acquire of a held key fails and names the holder', async () => {
    const held = await provider.acquireFencedLease('k', 'a', LONG);
    const result = await provider.acquireFencedLease('k', 'b', LONG);
    assert.equal(result.acquired, false);
    assert.equal(result.owner, 'a');
    assert.equal(result.fence, held.fence);
    assert.equal(result.expiresAt.getTime(), held.expiresAt.getTime());
    assert.equal(await provider.getLeaseOwner('k'), 'a');
  });

  test("a failed acquire does not extend the holder's lease", async () => {
    const held = await provider.acquireFencedLease('k', 'a', SHORT);
    await provider.acquireFencedLease('k', 'b', LONG);
    await expire();
    assert.equal(await provider.getLeaseOwner('k'), undefined);
    assert.ok(held.acquired);
  });

  test('the owner of absent and expired keys is undefined', async () => {
    assert.equal(await provider.getLeaseOwner('nobody'), undefined);
    await provider.acquireFencedLease('k', 'a', SHORT);
    assert.equal(await provider.getLeaseOwner('k'), 'a');
    await expire();
    assert.equal(await provider.getLeaseOwner('k'), undefined);
    assert.equal(await provider.getLease('k'), undefined);
  });

  test('getLease returns the live record', async () => {
    const held = await provider.acquireFencedLease('k', 'a', LONG);
    const found = await lease('k');
    assert.deepEqual([found.key, found.owner, found.fence], ['k', 'a', held.fence]);
    assert.equal(found.expiresAt.getTime(), held.expiresAt.getTime());
    assert.ok(found.acquiredAt < found.expiresAt);
    assert.equal(await provider.getLease('other'), undefined);
  });

  test('release by the holder frees the key', async () => {
    await provider.acquireFencedLease('k', 'a', LONG);
    assert.equal(await provider.releaseLease('k', 'a'), undefined);
    assert.equal(await provider.getLeaseOwner('k'), undefined);
    const result = await provider.acquireFencedLease('k', 'b', LONG);
    assert.ok(result.acquired && result.owner === 'b');
  });

  test('release of an own expired lease is quiet', async () => {
    await provider.acquireFencedLease('k', 'a', SHORT);
    await expire();
    await provider.releaseLease('k', 'a');
    assert.equal(await provider.getLeaseOwner('k'), undefined);
  });

  test('release by a non-holder or of an absent key changes nothing', async () => {
    const held = await provider.acquireFencedLease('k', 'a', LONG);
    await provider.releaseLease('k', 'b');
    await provider.releaseLease('absent', 'a');
    const found = await lease('k');
    assert.deepEqual([found.owner, found.fence, found.expiresAt], ['a', held.fence, held.expiresAt]);
  });

  test('release of a lease taken over after expiry spares the new holder', async () => {
    await provider.acquireFencedLease('k', 'a', SHORT);
    await expire();
    await provider.acquireFencedLease('k', 'b', LONG);
    await provider.releaseLease('k', 'a');
    assert.equal(await provider.getLeaseOwner('k'), 'b');
  });

  test('renew by the holder extends the expiry', async () => {
    const held = await provider.acquireFencedLease('k', 'a', 2_000);
    assert.equal(await provider.renewLease('k', 'a', LONG), true);
    const found = await lease('k');
    assert.equal(found.fence, held.fence);
    assert.ok(found.expiresAt > held.expiresAt);
    near(found.expiresAt, LONG);
  });

  test('renew can shorten the lease', async () => {
    await provider.acquireFencedLease('k', 'a', LONG);
    assert.equal(await provider.renewLease('k', 'a', SHORT), true);
    await expire();
    assert.equal(await provider.getLeaseOwner('k'), undefined);
  });

  test('renew after expiry returns false even if nobody took it', async () => {
    await provider.acquireFencedLease('k', 'a', SHORT);
    await expire();
    assert.equal(await provider.renewLease('k', 'a', LONG), false);
    assert.equal(await provider.getLeaseOwner('k'), undefined);
  });

  test('renew of an absent or foreign lease returns false', async () => {
    const held = await provider.acquireFencedLease('k', 'a', LONG);
    assert.equal(await provider.renewLease('k', 'b', LONG), false);
    assert.equal(await provider.renewLease('absent', 'a', LONG), false);
    const found = await lease('k');
    assert.deepEqual([found.owner, found.expiresAt], ['a', held.expiresAt]);
  });

  test('renew after release returns false', async () => {
    await provider.acquireFencedLease('k', 'a', LONG);
    await provider.releaseLease('k', 'a');
    assert.equal(await provider.renewLease('k', 'a', LONG), false);
  });

  test('transfer moves a live lease with a new fence', async () => {
    const held = await provider.acquireFencedLease('k', 'a', 2_000);
    assert.equal(await provider.transferLease('k', 'a', 'b', LONG), true);
    const found = await lease('k');
    assert.equal(found.owner, 'b');
    assert.ok(found.fence > held.fence);
    near(found.expiresAt, LONG);
    assert.equal(await provider.renewLease('k', 'a', LONG), false);
    assert.equal(await provider.renewLease('k', 'b', LONG), true);
  });

  test('transfer leaves no moment where the key is free', async () => {
    await provider.acquireFencedLease('k', 'a', LONG);
    assert.equal(await provider.transferLease('k', 'a', 'b', LONG), true);
    const taken = await provider.acquireFencedLease('k', 'c', LONG);
    assert.ok(taken.acquired === false && taken.owner === 'b');
  });

  test('transfer to self is a renew', async () => {
    const held = await provider.acquireFencedLease('k', 'a', 2_000);
    assert.equal(await provider.transferLease('k', 'a', 'a', LONG), true);
    const found = await lease('k');
    assert.deepEqual([found.owner, found.fence], ['a', held.fence]);
    assert.ok(found.expiresAt > held.expiresAt);
  });

  test('transfer of an expired, absent or foreign lease fails and changes nothing', async () => {
    await provider.acquireFencedLease('gone', 'a', SHORT);
    await expire();
    assert.equal(await provider.transferLease('gone', 'a', 'b', LONG), false);
    assert.equal(await provider.getLeaseOwner('gone'), undefined);
    assert.equal(await provider.transferLease('absent', 'a', 'b', LONG), false);
    assert.equal(await provider.getLeaseOwner('absent'), undefined);
    const held = await provider.acquireFencedLease('k', 'x', LONG);
    assert.equal(await provider.transferLease('k', 'a', 'b', LONG), false);
    const found = await lease('k');
    assert.deepEqual([found.owner, found.fence, found.expiresAt], ['x', held.fence, held.expiresAt]);
  });

  test('fences increase across release, expiry and transfer', async () => {
    const fences = [(await provider.acquireFencedLease('k', 'a', LONG)).fence];
    await provider.releaseLease('k', 'a');
    fences.push((await provider.acquireFencedLease('k', 'b', SHORT)).fence);
    await expire();
    fences.push((await provider.acquireFencedLease('k', 'b', LONG)).fence);
    await provider.transferLease('k', 'b', 'c', LONG);
    fences.push((await lease('k')).fence);
    await provider.releaseLease('k', 'c');
    fences.push((await provider.acquireFencedLease('k', 'a', LONG)).fence);
    for (let i = 1; i < fences.length; i++) assert.ok(fences[i]! > fences[i - 1]!, String(fences));
  });

  test('fences are ordered across keys too', async () => {
    const one = await provider.acquireFencedLease('k1', 'a', LONG);
    const two = await provider.acquireFencedLease('k2', 'a', LONG);
    assert.ok(two.fence > one.fence);
  });

  const KEYS = [
    'a\0b',
    '\0',
    'a\0',
    '\0\0\0',
    'thread\0\u00e9\u4e2d\u{1f600}',
    'x'.repeat(1024),
    '\u00e9'.repeat(512),
    'x'.repeat(4000), // mapped (keys.ts)
    'res\0' + '\u4e2d'.repeat(2000), // mapped, cut at a character
    'lone\ud800',
    '\udc00',
    'res\0thread\udbff\u{1f600}\udc00',
  ];
  for (const key of KEYS) {
    test(`keys and owners round-trip losslessly: ${JSON.stringify(key).slice(0, 30)}`, async () => {
      const owner = 'run\0' + key.slice(0, 100);
      const result = await provider.acquireFencedLease(key, owner, LONG);
      assert.ok(result.acquired && result.owner === owner);
      assert.equal(await provider.getLeaseOwner(key), owner);
      const found = await lease(key);
      assert.deepEqual([found.key, found.owner], [key, owner]);
      const other = await provider.acquireFencedLease(key, 'other', LONG);
      assert.equal(other.owner, owner);
    });
  }

  test('NUL escape look-alikes are different keys', async () => {
    const keys = ['a\0b', 'a', 'a\\0b', 'ab', 'a\0'];
    for (const [i, key] of keys.entries()) assert.ok((await provider.acquireFencedLease(key, `o${i}`, LONG)).acquired, key);
    for (const [i, key] of keys.entries()) assert.equal(await provider.getLeaseOwner(key), `o${i}`);
    await provider.releaseLease('a\0b', 'o0');
    const owners = [];
    for (const key of keys) owners.push(await provider.getLeaseOwner(key));
    assert.deepEqual(owners, [undefined, 'o1', 'o2', 'o3', 'o4']);
  });

  test('long keys and keys or owners with lone surrogates are distinct leases', async () => {
    const keys = ['x'.repeat(4000), 'x'.repeat(4000) + 'y', 'x'.repeat(3999), 'a\ud800', 'a\udc00', 'a\ufffd', 'a'];
    for (const [i, key] of keys.entries()) assert.ok((await provider.acquireLease(key, `o${i}\udfff`, LONG)).acquired, key);
    for (const [i, key] of keys.entries()) assert.equal(await provider.getLeaseOwner(key), `o${i}\udfff`);
    assert.deepEqual(await provider.acquireLease('a', 'o6\ufffd', LONG), { acquired: false, owner: 'o6\udfff' });
  });

  test('a failed acquire is logged at error level with its key, then thrown', async () => {
    logged.length = 0;
    await assert.rejects(provider.acquireLease('thread\0key', '', LONG), RangeError);
    assert.equal(logged.length, 1);
    assert.match(logged[0]!, /acquireLease failed for key "thread\\u0000key"/);
  });

  test('owner comparison is exact', async () => {
    await provider.acquireFencedLease('k', 'a\0', LONG);
    assert.equal(await provider.renewLease('k', 'a', LONG), false);
    assert.equal(await provider.renewLease('k', 'A\0', LONG), false);
    assert.equal((await provider.acquireFencedLease('k', 'a', LONG)).acquired, false);
    assert.equal(await provider.renewLease('k', 'a\0', LONG), true);
  });

  test('a TTL of one millisecond and of 365 days are accepted', async () => {
    assert.ok((await provider.acquireFencedLease('short', 'a', 1)).acquired);
    const result = await provider.acquireFencedLease('long', 'a', YEAR);
    assert.ok(result.acquired);
    near(result.expiresAt, YEAR, 60_000);
  });

  test('concurrent acquires in one process elect one owner', async () => {
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => provider.acquireFencedLease('hot', `o${i}`, LONG)));
    const winners = results.filter((r) => r.acquired);
    assert.equal(winners.length, 1);
    assert.ok(results.every((r) => r.owner === winners[0]!.owner));
  });

  test('a key seen held is still won as soon as it is free', async () => {
    const held = await provider.acquireFencedLease('k', 'a', 2_000);
    for (let i = 0; i < 3; i++) {
      const lost = await provider.acquireFencedLease('k', 'b', LONG);
      assert.deepEqual([lost.acquired, lost.owner, lost.fence], [false, 'a', held.fence]);
      assert.equal(lost.expiresAt.getTime(), held.expiresAt.getTime());
    }
    const again = await provider.acquireFencedLease('k', 'a', LONG);
    assert.ok(again.acquired && again.fence === held.fence && again.expiresAt > held.expiresAt);
    await provider.releaseLease('k', 'a');
    const won = await provider.acquireFencedLease('k', 'b', SHORT);
    assert.ok(won.acquired && won.owner === 'b' && won.fence > held.fence);
    assert.equal((await provider.acquireFencedLease('k', 'c', LONG)).acquired, false);
    await expire();
    const taken = await provider.acquireFencedLease('k', 'c', LONG);
    assert.ok(taken.acquired && taken.fence > won.fence);
    assert.equal(await provider.transferLease('k', 'c', 'd', LONG), true);
    const moved = await provider.acquireFencedLease('k', 'c', LONG);
    assert.ok(!moved.acquired && moved.owner === 'd');
  });
});

// --- bad input (SPEC §4) ------------------------------------------------------------------

type Method = 'acquireLease' | 'getLeaseOwner' | 'getLease' | 'releaseLease' | 'renewLease' | 'transferLease';
const GOOD: Record<string, unknown> = { key: 'k', owner: 'o', fromOwner: 'o', toOwner: 'p', ttlMs: LONG };
const METHODS: Record<Method, string[]> = {
  acquireLease: ['key', 'owner', 'ttlMs'],
  getLeaseOwner: ['key'],
  getLease: ['key'],
  releaseLease: ['key', 'owner'],
  renewLease: ['key', 'owner', 'ttlMs'],
  transferLease: ['key', 'fromOwner', 'toOwner', 'ttlMs'],
};
const NAME_TYPE_ERRORS: unknown[] = [null, undefined, 1, 1.5, Buffer.from('k'), ['k'], {}, new String('k'), Symbol('k')];
// A key over 1024 bytes is mapped and a lone surrogate stored as WTF-8 (keys.ts): only owners have a length limit.
const KEY_VALUE_ERRORS: unknown[] = [''];
const NAME_VALUE_ERRORS: unknown[] = ['', 'x'.repeat(1025), '\u00e9'.repeat(513)];
const TTL_TYPE_ERRORS: unknown[] = [null, undefined, true, false, 1.5, Number.NaN, Infinity, -Infinity, '1000', 1000n, [1]];
const TTL_VALUE_ERRORS: unknown[] = [0, -0, -1, -LONG, YEAR + 1, 1e30];

interface Case {
  method: Method;
  param: string;
  value: unknown;
  error: typeof TypeError | typeof RangeError;
}

function cases(): Case[] {
  const out: Case[] = [];
  for (const [method, params] of Object.entries(METHODS) as [Method, string[]][]) {
    for (const param of params) {
      const [types, values] =
        param === 'ttlMs'
          ? [TTL_TYPE_ERRORS, TTL_VALUE_ERRORS]
          : [NAME_TYPE_ERRORS, param === 'key' ? KEY_VALUE_ERRORS : NAME_VALUE_ERRORS];
      for (const value of types) out.push({ method, param, value, error: TypeError });
      for (const value of values) out.push({ method, param, value, error: RangeError });
    }
  }
  return out;
}

function call(target: PostgresLeaseProvider, { method, param, value }: Case): Promise<unknown> {
  const args = METHODS[method].map((p) => (p === param ? value : GOOD[p]));
  return (target[method] as (...a: unknown[]) => Promise<unknown>)(...args);
}

function shown(value: unknown): string {
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'symbol') return 'Symbol';
  return (JSON.stringify(value) ?? String(value)).slice(0, 20);
}

describe('bad input', () => {
  test('every bad argument is rejected with the stated error type and changes nothing', async () => {
    const all = cases();
    assert.ok(all.length > 130);
    const held = await provider.acquireFencedLease('k', 'o', LONG);
    for (const c of all) {
      const label = `${c.method}(${c.param}=${shown(c.value)})`;
      await assert.rejects(call(provider, c), (error: unknown) => {
        assert.ok(error instanceof c.error, `${label}: ${String(error)}`);
        assert.ok(error instanceof LeaseError, `${label}: not a LeaseError`);
        assert.ok((error as Error).message.includes(c.param), `${label}: ${(error as Error).message}`);
        return true;
      });
      const found = await lease('k');
      assert.deepEqual([found.owner, found.fence, found.expiresAt], ['o', held.fence, held.expiresAt], label);
    }
  });

  test('bad arguments are rejected before any I/O', async () => {
    const pool = new pg.Pool({ connectionString: 'postgresql://u:pw@127.0.0.1:1/none' });
    const unreachable = new PostgresLeaseProvider({ pool }, { timeoutMs: 1_000 });
    try {
      for (const c of cases()) await assert.rejects(call(unreachable, c), c.error);
      assert.equal(pool.totalCount, 0, 'a connection was attempted');
    } finally {
      await unreachable.close();
      await pool.end();
    }
  });

  test('bad constructor options are rejected', () => {
    const url = { connectionString: 'postgresql://127.0.0.1:1/x' };
    assert.throws(() => new PostgresLeaseProvider(url, { table: 'no-dash' }), RangeError);
    assert.throws(() => new PostgresLeaseProvider(url, { table: 'x'.repeat(41) }), /at most 40/);
    assert.throws(() => new PostgresLeaseProvider(url, { schema: '1st' }), RangeError);
    assert.throws(() => new PostgresLeaseProvider(url, { timeoutMs: 0 }), RangeError);
    assert.throws(() => new PostgresLeaseProvider(url, { timeoutMs: Number.NaN }), TypeError);
    assert.throws(() => new PostgresLeaseProvider({} as never), TypeError);
    assert.throws(() => new PostgresLeaseProvider({ pool: {} } as never), TypeError);
  });
});
