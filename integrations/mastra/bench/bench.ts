/**
 * A small benchmark: `npm run bench [-- --out FILE]` (after `npm run build`).
 *
 * 1. The TypeScript provider against raw `pg` running the same SQL (the catalogue's statements,
 *    rendered by the same code): acquire + release of distinct keys, one caller at a time and
 *    eight at once, on pools of the same size; alternating rounds, the median of each side.
 * 2. PubSub publish → deliver latency between two processes: this process publishes, a child
 *    process subscribed with `PostgresPubSub` receives; both read the same machine clock
 *    (`performance.timeOrigin + performance.now()`), so each delay is one-way.
 *
 * Prints a table and writes the figures as JSON. It creates (and drops) its own database on
 * $SQL_LEASE_TEST_DSN, migrated with the repository's Python, like the tests.
 */

import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

import pg from 'pg';

import { buildStatements } from '../src/catalogue.js';
import { PostgresLeaseProvider, PostgresPubSub } from '../src/index.js';
import { createDatabase } from '../test/helpers.js';

const args = process.argv.slice(2);
const outIndex = args.indexOf('--out');
const out = outIndex >= 0 ? args[outIndex + 1]! : 'bench-results.json';
const OPS = Number(process.env.BENCH_OPS ?? 1_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const EVENTS = Number(process.env.BENCH_EVENTS ?? 500);
const now = (): number => performance.timeOrigin + performance.now();

interface Cell {
  provider: number;
  raw: number;
  ratio: number;
  pairedRatio: number;
  providerCpuUsPerOp: number;
  rawCpuUsPerOp: number;
}

function stats(samples: number[]): { median: number; p99: number; max: number } {
  const sorted = [...samples].sort((x, y) => x - y);
  const at = (q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
  return { median: at(0.5), p99: at(0.99), max: sorted[sorted.length - 1]! };
}

/** Ops per second of `op` run by `concurrency` callers, and this process's CPU µs per op. */
async function throughput(concurrency: number, op: (i: number) => Promise<void>): Promise<{ ops: number; cpuUs: number }> {
  let next = 0;
  const cpu = process.cpuUsage();
  const started = performance.now();
  await Promise.all(
    [...Array(concurrency).keys()].map(async () => {
      for (let i = next++; i < OPS; i = next++) await op(i);
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  return { ops: OPS / seconds, cpuUs: (used.user + used.system) / OPS };
}

const db = await createDatabase();
const results: Record<string, unknown> = { ops: OPS, rounds: ROUNDS, events: EVENTS, node: process.version };
try {
  // -- 1. provider vs raw pg ---------------------------------------------------------------
  const pool = new pg.Pool({ connectionString: db.url, max: 8 });
  const provider = new PostgresLeaseProvider({ connectionString: db.url }, { maxConnections: 8 });
  const sql = buildStatements('leases');
  const owner = Buffer.from('bench-owner');
  let round = 0;
  const viaProvider = async (i: number): Promise<void> => {
    const key = `k-${round}-${i}`;
    await provider.acquireLease(key, 'bench-owner', 30_000);
    await provider.releaseLease(key, 'bench-owner');
  };
  const viaRaw = async (i: number): Promise<void> => {
    const key = Buffer.from(`k-${round}-${i}`);
    await pool.query({ text: sql.acquire, values: [key, owner, 30_000], rowMode: 'array' });
    await pool.query({ text: sql.release, values: [key, owner], rowMode: 'array' });
  };
  const lease: Record<string, Cell> = {};
  await throughput(8, viaProvider); // warm up both pools and the server
  round++;
  await throughput(8, viaRaw);
  // Alternating rounds, median of each side: a shared machine's noise hits both alike.
  const median = (xs: number[]): number => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
  for (const concurrency of [1, 8]) {
    const p: { ops: number; cpuUs: number }[] = [];
    const r: { ops: number; cpuUs: number }[] = [];
    for (let k = 0; k < ROUNDS; k++) {
      round++;
      p.push(await throughput(concurrency, viaProvider));
      round++;
      r.push(await throughput(concurrency, viaRaw));
    }
    const [po, ro] = [median(p.map((x) => x.ops)), median(r.map((x) => x.ops))];
    lease[`concurrency ${concurrency}`] = {
      provider: po,
      raw: ro,
      ratio: po / ro,
      // Per round, provider/raw of adjacent rounds: their median is less exposed to drifting load.
      pairedRatio: median(p.map((x, i) => x.ops / r[i]!.ops)),
      providerCpuUsPerOp: median(p.map((x) => x.cpuUs)),
      rawCpuUsPerOp: median(r.map((x) => x.cpuUs)),
    };
  }
  results.leaseOpsPerSecond = lease; // one op = acquire + release (two statements)
  await provider.close();
  await pool.end();

  // -- 2. publish → deliver between two processes -------------------------------------------
  const child = spawn(process.execPath, [fileURLToPath(new URL('./subscriber.js', import.meta.url)), db.url, 'bench-topic'], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout });
  const next = (): Promise<string> => new Promise((resolve) => lines.once('line', resolve));
  if ((await next()) !== 'ready') throw new Error('the subscriber did not start');
  const publisher = new PostgresPubSub({ connectionString: db.url }, { cleanupIntervalMs: 0 });
  await publisher.ready();
  const done = next();
  for (let i = 0; i < EVENTS; i++) {
    await publisher.publish('bench-topic', { type: 'tick', runId: 'bench', data: { i, sentAt: now(), last: i === EVENTS - 1 } });
    await new Promise((resolve) => setTimeout(resolve, 2)); // light, steady load
  }
  const delays = JSON.parse(await done) as number[];
  child.stdin.end();
  await publisher.close();
  results.publishToDeliverMs = { ...stats(delays), received: delays.length };
} finally {
  await db.drop();
}

const lease = results.leaseOpsPerSecond as Record<string, Cell>;
const latency = results.publishToDeliverMs as { median: number; p99: number; max: number; received: number };
console.log(`acquire+release of ${OPS} keys, median of ${ROUNDS} (ops/s)  provider    raw pg  provider/raw  paired   CPU µs/op provider  raw`);
for (const [name, row] of Object.entries(lease)) {
  console.log(
    `  ${name.padEnd(34)} ${row.provider.toFixed(0).padStart(8)}  ${row.raw.toFixed(0).padStart(10)}  ${row.ratio.toFixed(2).padStart(12)}` +
      `  ${row.pairedRatio.toFixed(2).padStart(6)}  ${row.providerCpuUsPerOp.toFixed(0).padStart(18)}  ${row.rawCpuUsPerOp.toFixed(0).padStart(4)}`,
  );
}
console.log(`publish → deliver between two processes (${latency.received} events, ms)`);
console.log(`  median ${latency.median.toFixed(2)}   p99 ${latency.p99.toFixed(2)}   max ${latency.max.toFixed(2)}`);
writeFileSync(out, `${JSON.stringify(results, null, 2)}\n`);
console.log(`written to ${out}`);
