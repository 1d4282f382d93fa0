/**
 * The Node side of the cross-language race: `node hammer.js URL WORKER SECONDS SEED KEYS_JSON [POOLER]`.
 * Prints `ready`, waits for a line on stdin, runs random acquire/renew/transfer/release on the
 * hot keys with short TTLs for SECONDS, then prints its events as JSON (times in database time,
 * epoch milliseconds), the same shape as test/py/peer.py's.
 */

import { once } from 'node:events';

import { PostgresLeaseProvider } from '../../src/index.js';
import type { HistoryEvent } from '../history.js';

const [url, worker, seconds, seed, keysJson, pooler] = process.argv.slice(2) as [string, string, string, string, string, string?];
const keys = JSON.parse(keysJson) as string[];

// A small deterministic generator (mulberry32), so a failing run can be replayed by seed.
let state = Number(seed) >>> 0;
function random(): number {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const choice = <T>(items: T[]): T => items[Math.floor(random() * items.length)]!;
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

const provider = new PostgresLeaseProvider(
  { connectionString: url },
  { timeoutMs: 10_000, maxConnections: 4, pooler: pooler === 'transaction' ? 'transaction' : undefined },
);
const events: HistoryEvent[] = [];
const held = new Map<string, [string, bigint]>();
let serial = 0;
const newOwner = (): string => `${worker}\0${++serial}`;
const record = (event: Omit<HistoryEvent, 'lang'>): void => {
  events.push({ ...event, lang: 'node' });
};

await provider.now(); // connected
process.stdout.write('ready\n');
process.stdin.setEncoding('utf8');
await once(process.stdin, 'data');
process.stdin.pause();

const deadline = performance.now() + Number(seconds) * 1000;
while (performance.now() < deadline) {
  const key = choice(keys);
  const ttl = choice([15, 40, 80, 200]);
  const mine = held.get(key);
  const roll = random();
  if (mine === undefined || roll < 0.1) {
    const owner = mine?.[0] ?? newOwner();
    const res = await provider.acquireFencedLease(key, owner, ttl);
    if (res.acquired) {
      const expires = res.expiresAt.getTime();
      record({ op: 'acquire', key, owner, ok: true, fence: String(res.fence), t: expires - ttl, expires });
      held.set(key, [owner, res.fence]);
    } else {
      record({ op: 'acquire', key, owner, ok: false, holder: res.owner, holderFence: String(res.fence) });
      held.delete(key);
    }
    continue;
  }
  const [owner, fence] = mine;
  if (roll < 0.5) {
    if (roll < 0.13) await sleep(250); // a paused owner: its lease expires meanwhile
    const renewed = await provider.renew(key, owner, ttl);
    if (renewed === undefined) {
      held.delete(key);
      record({ op: 'renew', key, owner, ok: false, fence: String(fence) });
    } else {
      const expires = renewed.expiresAt.getTime();
      record({ op: 'renew', key, owner, ok: true, fence: String(renewed.fence), t: expires - ttl, expires });
    }
  } else if (roll < 0.7) {
    const to = newOwner();
    const moved = await provider.transfer(key, owner, to, ttl);
    if (moved === undefined) {
      held.delete(key);
      record({ op: 'transfer', key, owner, ok: false, fence: String(fence), toOwner: to });
    } else {
      const expires = moved.expiresAt.getTime();
      record({
        op: 'transfer',
        key,
        owner,
        ok: true,
        fence: String(moved.fence),
        t: expires - ttl,
        expires,
        toOwner: to,
        fromFence: String(fence),
      });
      held.set(key, [to, moved.fence]);
    }
  } else if (roll < 0.9) {
    const released = await provider.release(key, owner);
    held.delete(key);
    if (released !== undefined) {
      record({ op: 'release', key, owner, ok: true, fence: String(released.fence), t: released.at.getTime() });
    }
  } else {
    held.delete(key); // walk away: let it expire
    await sleep(choice([0, 10, 50]));
  }
}
await provider.close();
process.stderr.write(`acquire re-runs: ${provider.acquireReruns}\n`);
process.stdout.write(JSON.stringify(events) + '\n');
