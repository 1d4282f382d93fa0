/**
 * The history checker of the race tests, ported from the Python tests/integration/test_races.py:
 * rebuild every tenure from the successes (database times, epoch milliseconds) and check one
 * live owner per key at a time, fences strictly increasing, and that every failed acquire named
 * a holder that really held the key under that fence.
 */

import assert from 'node:assert/strict';

export interface HistoryEvent {
  op: 'acquire' | 'renew' | 'transfer' | 'release';
  key: string;
  owner: string;
  ok: boolean;
  lang: 'python' | 'node';
  fence?: string;
  /** When it took effect (successes), epoch ms in database time. */
  t?: number;
  expires?: number;
  toOwner?: string;
  fromFence?: string;
  holder?: string;
  holderFence?: string;
}

export class Tenure {
  ended: number | undefined;
  constructor(
    readonly key: string,
    readonly owner: string,
    readonly fence: bigint,
    readonly start: number,
    public expiry: number,
    readonly lang: string,
  ) {}

  get end(): number {
    return this.ended === undefined ? this.expiry : Math.min(this.expiry, this.ended);
  }

  toString(): string {
    return `Tenure(${JSON.stringify(this.owner)}, fence=${this.fence}, ${this.start}..${this.end})`;
  }
}

/** A renewal is judged live just before it stamps the new expiry; allow that instant. */
const STAMP_SLACK = 5;

/** `events`: each worker's events in the order it recorded them (workers one after another). */
export function checkHistory(events: HistoryEvent[]): { tenures: Map<string, Tenure[]>; failed: number } {
  const tenures = new Map<string, Tenure>();
  const id = (key: string, fence: string | bigint | undefined): string => `${key}\u0001${String(fence)}`;
  // Times have millisecond resolution, so events can tie. Every event of one tenure comes from
  // the one worker that holds it, in program order, so a stable sort keeps those ties in order
  // as long as each worker's events are passed in the order it recorded them.
  const successes = events.filter((e) => e.ok).sort((a, b) => a.t! - b.t!);
  for (const e of successes) {
    assert.ok(e.t !== undefined && e.fence !== undefined, `success without time or fence: ${JSON.stringify(e)}`);
    const shown = JSON.stringify(e);
    if (e.op === 'acquire' || e.op === 'renew') {
      const tenure = tenures.get(id(e.key, e.fence));
      if (tenure === undefined) {
        assert.equal(e.op, 'acquire', `renew of unknown tenure: ${shown}`);
        tenures.set(id(e.key, e.fence), new Tenure(e.key, e.owner, BigInt(e.fence), e.t, e.expires!, e.lang));
      } else {
        assert.equal(tenure.owner, e.owner, `${shown} inside ${tenure}`);
        assert.equal(tenure.ended, undefined, `${shown} after ${tenure} ended`);
        assert.ok(e.t <= tenure.expiry + STAMP_SLACK, `${shown} after ${tenure} expired`);
        tenure.expiry = e.expires!;
      }
    } else if (e.op === 'transfer') {
      const old = tenures.get(id(e.key, e.fromFence));
      assert.ok(old !== undefined, `transfer of unknown tenure: ${shown}`);
      assert.ok(old.ended === undefined && e.t <= old.expiry + STAMP_SLACK, `${shown} vs ${old}`);
      old.ended = e.t;
      tenures.set(id(e.key, e.fence), new Tenure(e.key, e.toOwner!, BigInt(e.fence), e.t, e.expires!, e.lang));
    } else {
      const tenure = tenures.get(id(e.key, e.fence));
      assert.ok(tenure !== undefined && tenure.owner === e.owner, `release of unknown tenure: ${shown}`);
      tenure.ended = e.t;
    }
  }
  const byKey = new Map<string, Tenure[]>();
  for (const tenure of tenures.values()) byKey.set(tenure.key, [...(byKey.get(tenure.key) ?? []), tenure]);
  for (const [key, items] of byKey) {
    // Starts can tie at the clock's resolution (1 ms here); the fence orders those.
    items.sort((a, b) => a.start - b.start || (a.fence < b.fence ? -1 : a.fence > b.fence ? 1 : 0));
    for (let i = 1; i < items.length; i++) {
      const [prev, next] = [items[i - 1]!, items[i]!];
      assert.ok(next.fence > prev.fence, `${JSON.stringify(key)}: fence went back: ${prev} then ${next}`);
      assert.ok(next.start >= prev.end, `${JSON.stringify(key)}: two live owners: ${prev} and ${next}`);
    }
  }
  const failed = events.filter((e) => e.op === 'acquire' && !e.ok);
  for (const e of failed) {
    assert.ok(e.holder !== undefined && e.holder !== null, `failed acquire without a holder: ${JSON.stringify(e)}`);
    const tenure = tenures.get(id(e.key, e.holderFence));
    assert.ok(tenure !== undefined && tenure.owner === e.holder, `phantom holder in ${JSON.stringify(e)}`);
  }
  return { tenures: byKey, failed: failed.length };
}
