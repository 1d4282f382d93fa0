/**
 * `npm run bench:pooler [-- --quick] [--rounds N] [--seconds S] [--clients 1,16,64]
 * [--pool-size N] [--max-connections N] [--out FILE]` (after `npm run build`): direct vs through PgBouncer, side by
 * side (see pooler.ts). Prints a table and writes the figures as JSON (default
 * bench-pooler-results.json). Needs the `pgbouncer` binary and the test server
 * ($SQL_LEASE_TEST_DSN, trust authentication).
 */

import { writeFileSync } from 'node:fs';

import { FULL, QUICK, runPoolerBench, table, type PoolerBenchOptions } from './pooler.js';

const args = process.argv.slice(2);
const value = (name: string): string | undefined => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const options: PoolerBenchOptions = { ...(args.includes('--quick') ? QUICK : FULL) };
if (value('--rounds') !== undefined) options.rounds = Number(value('--rounds'));
if (value('--seconds') !== undefined) options.seconds = Number(value('--seconds'));
if (value('--clients') !== undefined) options.clients = value('--clients')!.split(',').map(Number);
if (value('--pool-size') !== undefined) options.poolSize = Number(value('--pool-size'));
if (value('--max-connections') !== undefined) options.maxConnections = Number(value('--max-connections'));
for (const n of [options.rounds, options.seconds, options.poolSize, options.maxConnections, ...options.clients]) {
  if (!(n > 0)) throw new Error('--rounds, --seconds, --clients, --pool-size and --max-connections take positive numbers');
}
const out = value('--out') ?? 'bench-pooler-results.json';

const result = await runPoolerBench(options);
console.log(table(result));
writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
console.log(`written to ${out}`);
