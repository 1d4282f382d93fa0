/**
 * Throughput straight to PostgreSQL and through PgBouncer, side by side in one run (the
 * TypeScript twin of the Python `benchmarks/bench_pooler.py`). Variants of each cell:
 *
 * - `direct`: the provider straight to the server (its defaults: unnamed extended-protocol
 *   statements, timeouts as startup parameters);
 * - `pgbouncer-tx`: `pooler: 'transaction'` through a PgBouncer in transaction pooling started
 *   here: one simple query per call, the server-side timeouts set inside it, the hot statements
 *   as calls of the table's server functions (revision 0005: plans kept per server session);
 * - `pgbouncer-tx-plain`: the same on a database at revision 0004, without those functions
 *   (plain statements, parsed and planned by the server on every call).
 *
 * Cells, for each number of callers N: `lifecycle_cN` (each caller loops acquire -> renew ->
 * release on its own key; one op is the three calls) and `read_cN` (each caller loops
 * `getLeaseOwner` on a key it holds). Each provider has min(N, `maxConnections`) connections
 * (default 32: the shared test server allows 100 in all); PgBouncer `poolSize` server
 * connections per database. A concurrency's providers are closed before the next one's open. Rounds alternate the variants (reversed every other round)
 * so a shared machine's noise hits them alike; a cell reports each variant's median ops/s
 * and its ratio to `direct`'s median.
 */

import { PostgresLeaseProvider } from '../src/index.js';
import { alembic, createDatabase, type TestDatabase } from '../test/helpers.js';
import { startPgBouncer, type Bouncer } from '../test/pgbouncer.js';

export interface PoolerBenchOptions {
  rounds: number;
  /** Seconds each variant runs in each cell and round. */
  seconds: number;
  clients: number[];
  /** PgBouncer's server connections per database. */
  poolSize: number;
  /** Connections of each provider's pool at most. */
  maxConnections: number;
}

export const FULL: PoolerBenchOptions = { rounds: 3, seconds: 2, clients: [1, 16, 64], poolSize: 10, maxConnections: 32 };
export const QUICK: PoolerBenchOptions = { rounds: 1, seconds: 0.3, clients: [1, 16], poolSize: 10, maxConnections: 32 };

export const VARIANTS = ['direct', 'pgbouncer-tx', 'pgbouncer-tx-plain'] as const;
export type Variant = (typeof VARIANTS)[number];

export interface VariantResult {
  /** Median ops/s over the rounds. */
  opsPerSecond: number;
  /** That median over `direct`'s. */
  xDirect: number;
  rounds: number[];
}

export interface PoolerBenchResult {
  options: PoolerBenchOptions;
  node: string;
  cells: Record<string, Record<Variant, VariantResult>>;
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;

/** Ops per second of `callers` loops of `op(caller)` for `seconds`. */
async function rate(callers: number, seconds: number, op: (caller: number) => Promise<void>): Promise<number> {
  let ops = 0;
  const started = performance.now();
  const end = started + seconds * 1000;
  await Promise.all(
    Array.from({ length: callers }, async (_, caller) => {
      while (performance.now() < end) {
        await op(caller);
        ops++;
      }
    }),
  );
  return ops / ((performance.now() - started) / 1000);
}

async function cell(p: PostgresLeaseProvider, kind: 'lifecycle' | 'read', callers: number, seconds: number, tag: string): Promise<number> {
  const key = (caller: number): string => `${tag}-${caller}`;
  if (kind === 'read') {
    await Promise.all(Array.from({ length: callers }, (_, c) => p.acquireLease(key(c), 'reader', 600_000)));
    const ops = await rate(callers, seconds, async (c) => {
      await p.getLeaseOwner(key(c));
    });
    await Promise.all(Array.from({ length: callers }, (_, c) => p.releaseLease(key(c), 'reader')));
    return ops;
  }
  return rate(callers, seconds, async (c) => {
    const k = key(c);
    await p.acquireLease(k, 'worker', 30_000);
    await p.renewLease(k, 'worker', 30_000);
    await p.releaseLease(k, 'worker');
  });
}

/** Run the benchmark on fresh databases of $SQL_LEASE_TEST_DSN and a PgBouncer of its own. */
export async function runPoolerBench(options: PoolerBenchOptions): Promise<PoolerBenchResult> {
  const dbs: TestDatabase[] = [];
  let bouncer: Bouncer | undefined;
  const providers: PostgresLeaseProvider[] = [];
  try {
    const db = await createDatabase();
    dbs.push(db);
    const plain = await createDatabase();
    dbs.push(plain);
    await alembic(plain.url, ['downgrade', '0004']);
    bouncer = await startPgBouncer('transaction', options.poolSize);
    const cells: PoolerBenchResult['cells'] = {};
    let round = 0;
    for (const callers of options.clients) {
      const make = (variant: Variant): PostgresLeaseProvider => {
        const base = { maxConnections: Math.min(callers, options.maxConnections), timeoutMs: 10_000 };
        const p =
          variant === 'direct'
            ? new PostgresLeaseProvider({ connectionString: db.url }, base)
            : new PostgresLeaseProvider({ connectionString: bouncer!.url(variant === 'pgbouncer-tx' ? db.name : plain.name) }, { ...base, pooler: 'transaction' });
        providers.push(p);
        return p;
      };
      const byVariant = Object.fromEntries(VARIANTS.map((v) => [v, make(v)])) as Record<Variant, PostgresLeaseProvider>;
      // Warm up every pool to its size (and the server functions' plans).
      for (const v of VARIANTS) await cell(byVariant[v], 'lifecycle', callers, 0.1, `warm-${v}-${callers}`);
      for (const kind of ['lifecycle', 'read'] as const) {
        const samples = Object.fromEntries(VARIANTS.map((v) => [v, [] as number[]])) as Record<Variant, number[]>;
        for (let r = 0; r < options.rounds; r++) {
          const order = r % 2 === 0 ? [...VARIANTS] : [...VARIANTS].reverse();
          for (const v of order) samples[v].push(await cell(byVariant[v], kind, callers, options.seconds, `${kind}-${callers}-${round++}`));
        }
        const direct = median(samples.direct);
        cells[`${kind}_c${callers}`] = Object.fromEntries(
          VARIANTS.map((v) => [v, { opsPerSecond: median(samples[v]), xDirect: median(samples[v]) / direct, rounds: samples[v] }]),
        ) as Record<Variant, VariantResult>;
      }
      await Promise.all(VARIANTS.map((v) => byVariant[v].close()));
    }
    return { options, node: process.version, cells };
  } finally {
    await Promise.all(providers.map((p) => p.close()));
    await bouncer?.stop();
    await Promise.all(dbs.map((d) => d.drop()));
  }
}

/** The result as a table: one line per cell, each variant's ops/s and its ratio to direct. */
export function table(result: PoolerBenchResult): string {
  const { rounds, seconds } = result.options;
  const head = `ops/s, median of ${rounds} round(s) of ${seconds} s  ` + VARIANTS.map((v) => v.padStart(20)).join('');
  const rows = Object.entries(result.cells).map(
    ([name, cell]) =>
      `  ${name.padEnd(40)}` +
      VARIANTS.map((v) => `${cell[v].opsPerSecond.toFixed(0).padStart(9)} (${cell[v].xDirect.toFixed(2)}x)`.padStart(20)).join(''),
  );
  return [head, ...rows, '(lifecycle: acquire + renew + release; read: getLeaseOwner on a held key; (x): over direct)'].join('\n');
}
