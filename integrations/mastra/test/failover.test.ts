/**
 * A real failover: a primary and a streaming standby (synchronous replication) started by the
 * Python tests' own cluster helper (test/py/cluster.py), the provider on the host list with
 * `target_session_attrs=read-write`. Workers loop acquire -> renew -> release on their own keys
 * while the old primary is stopped and the standby promoted: every error during the switch is
 * a typed `LeaseError`, the provider works again on the promoted standby, fences never go
 * backwards (each key's, and every fence after the switch is above every fence before it), and
 * a lease granted before the switch is still there (nothing acknowledged was lost). A PubSub on
 * the same host list delivers an event published after the switch (its LISTEN connection
 * reconnects to the promoted standby).
 */

import assert from 'node:assert/strict';
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface, type Interface } from 'node:readline';
import { after, before, test } from 'node:test';

import type { Event } from '@mastra/core/events';
import pg from 'pg';

import { LeaseConnectionError, LeaseError, PostgresLeaseProvider, PostgresPubSub } from '../src/index.js';
import { PACKAGE_DIR, PYTHON, REPO_DIR, sleep, until } from './helpers.js';

interface Cluster {
  primary: number;
  standby: number;
  url: string;
}

let child: ChildProcessWithoutNullStreams;
let lines: Interface;
let cluster: Cluster;
const open: { close(): Promise<void> }[] = [];

function nextLine(ms = 60_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the cluster helper did not answer')), ms);
    lines.once('line', (line) => {
      clearTimeout(timer);
      resolve(line);
    });
  });
}

async function command(name: string): Promise<void> {
  child.stdin.write(`${name}\n`);
  const answer = await nextLine();
  assert.equal(answer, 'ok', `${name}: ${answer}`);
}

function provider(url: string): PostgresLeaseProvider {
  const p = new PostgresLeaseProvider({ connectionString: url }, { timeoutMs: 2_000, maxConnections: 4 });
  open.push(p);
  return p;
}

before(async () => {
  child = spawn(PYTHON, [`${PACKAGE_DIR}test/py/cluster.py`], { cwd: REPO_DIR, stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  lines = createInterface({ input: child.stdout });
  try {
    cluster = JSON.parse(await nextLine(120_000)) as Cluster;
  } catch (error) {
    throw new Error(`the cluster did not start: ${String(error)}\n${stderr}`);
  }
});

after(async () => {
  await Promise.all(open.map((p) => p.close()));
  if (child.exitCode === null) {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.stdin.end('quit\n');
    await exited;
  }
});

test('a standby alone refuses writes, typed; listed first with read-write, the primary is found', async () => {
  const standby = provider(`postgresql://postgres@127.0.0.1:${cluster.standby}/leases`);
  await assert.rejects(standby.acquireLease('probe', 'a', 30_000), (error: unknown) => {
    assert.ok(error instanceof LeaseConnectionError, String(error));
    assert.equal(error.outcomeUnknown, false);
    assert.match(error.message, /read-only/);
    return true;
  });
  const onlyStandby = provider(`postgresql://postgres@127.0.0.1:${cluster.standby}/leases?target_session_attrs=read-write`);
  await assert.rejects(onlyStandby.getLeaseOwner('probe'), (error: unknown) => {
    assert.ok(error instanceof LeaseConnectionError, String(error));
    assert.match(error.message, /not writable/);
    return true;
  });
  const standbyFirst = provider(
    `postgresql://postgres@127.0.0.1:${cluster.standby},127.0.0.1:${cluster.primary}/leases?target_session_attrs=read-write`,
  );
  assert.equal((await standbyFirst.acquireLease('probe', 'a', 30_000)).acquired, true);
  await standbyFirst.releaseLease('probe', 'a');
});

async function onPrimary(sql: string): Promise<void> {
  // Set for this session only, so it runs even while the server defaults to read-only.
  const client = new pg.Client({ connectionString: `postgresql://postgres@127.0.0.1:${cluster.primary}/postgres?options=-c%20default_transaction_read_only%3Doff` });
  await client.connect();
  try {
    await client.query(sql);
    await client.query('SELECT pg_catalog.pg_reload_conf()');
  } finally {
    await client.end();
  }
}

test('the primary turning read-only under a live connection: typed errors, no write, and writes resume after', async () => {
  const p = provider(cluster.url);
  assert.equal((await p.acquireLease('ro', 'a', 30_000)).acquired, true);
  try {
    await onPrimary('ALTER SYSTEM SET default_transaction_read_only = on');
    await sleep(200); // the reload reaches the pooled session before its next statement
    await assert.rejects(p.renewLease('ro', 'a', 30_000), (error: unknown) => {
      assert.ok(error instanceof LeaseConnectionError, String(error));
      assert.equal(error.sqlState, '25006');
      assert.equal(error.outcomeUnknown, false);
      return true;
    });
    // No host is writable now: each one is tried, and the call fails typed, nothing sent.
    await assert.rejects(p.acquireLease('ro2', 'a', 30_000), (error: unknown) => {
      assert.ok(error instanceof LeaseConnectionError, String(error));
      assert.equal(error.outcomeUnknown, false);
      return true;
    });
  } finally {
    await onPrimary('ALTER SYSTEM RESET default_transaction_read_only');
  }
  await sleep(200);
  assert.equal(await p.renewLease('ro', 'a', 30_000), true);
  assert.equal((await p.acquireLease('ro2', 'a', 30_000)).acquired, true);
  await p.releaseLease('ro', 'a');
  await p.releaseLease('ro2', 'a');
});

interface Worker {
  key: string;
  // beforeStop: the tenure was granted before the primary began to stop (a cycle that started
  // earlier may be granted by the promoted standby: it is then neither before nor after).
  fences: { fence: bigint; afterSwitch: boolean; beforeStop: boolean; strict: boolean }[];
  errors: unknown[];
  successesAfter: number;
}

test('across stopping the primary and promoting the standby: typed errors, then work goes on, fences only grow', async () => {
  const p = provider(cluster.url);
  const steady = await p.acquireLease('steady', 'keeper', 600_000);
  assert.equal(steady.acquired, true);
  const steadyFence = (await p.renew('steady', 'keeper', 600_000))?.fence;
  assert.ok(steadyFence !== undefined);
  const got: Event[] = [];
  const pubsub = new PostgresPubSub({ connectionString: cluster.url }, { timeoutMs: 2_000, pollIntervalMs: 500, cleanupIntervalMs: 0 });
  open.push(pubsub);
  await pubsub.subscribe('failover', async (event, ack) => {
    got.push(event);
    await ack?.();
  });
  let switched = false;
  let stopping = false;
  let stop = false;
  const workers: Worker[] = Array.from({ length: 4 }, (_, i) => ({ key: `hot-${i}`, fences: [], errors: [], successesAfter: 0 }));
  const loop = async (w: Worker): Promise<void> => {
    const owner = `owner-${w.key}`;
    let releasedLast = true; // the previous tenure ended for sure: the next fence must be above it
    while (!stop) {
      try {
        const afterSwitch = switched;
        if (!(await p.acquireLease(w.key, owner, 1_000)).acquired) {
          await sleep(50); // an earlier release whose outcome is unknown: wait for the expiry
          continue;
        }
        const tenure = await p.renew(w.key, owner, 1_000);
        if (tenure !== undefined) w.fences.push({ fence: tenure.fence, afterSwitch, beforeStop: !stopping, strict: releasedLast });
        releasedLast = false;
        await p.releaseLease(w.key, owner);
        releasedLast = true;
        if (afterSwitch) w.successesAfter++;
      } catch (error) {
        w.errors.push(error);
        await sleep(20);
      }
    }
  };
  const running = workers.map(loop);
  await sleep(500);
  const before = workers.reduce((n, w) => n + w.fences.length, 0);
  stopping = true;
  await command('stop-primary');
  await command('promote');
  switched = true;
  const deadline = performance.now() + 30_000;
  while (workers.some((w) => w.successesAfter < 5) && performance.now() < deadline) await sleep(50);
  stop = true;
  await Promise.all(running);

  const errors = workers.flatMap((w) => w.errors);
  assert.ok(before > 0, 'no grant before the switch');
  for (const w of workers) assert.ok(w.successesAfter >= 5, `${w.key}: ${w.successesAfter} cycles after the switch; errors: ${w.errors.map(String).join('\n')}`);
  const untyped = errors.filter((e) => !(e instanceof LeaseError));
  assert.deepEqual(untyped.map(String), [], 'every error during the switch is a LeaseError');
  for (const w of workers) {
    for (let i = 1; i < w.fences.length; i++) {
      const [prev, next] = [w.fences[i - 1]!, w.fences[i]!];
      const ok = next.strict ? next.fence > prev.fence : next.fence >= prev.fence;
      assert.ok(ok, `${w.key}: fence ${next.fence} after ${prev.fence}`);
    }
  }
  const all = workers.flatMap((w) => w.fences);
  const maxBefore = all.filter((f) => f.beforeStop).reduce((m, f) => (f.fence > m ? f.fence : m), 0n);
  const minAfter = all.filter((f) => f.afterSwitch).reduce((m, f) => (f.fence < m ? f.fence : m), maxBefore + (1n << 60n));
  assert.ok(minAfter > maxBefore, `a fence after the switch (${minAfter}) is not above every fence before it (${maxBefore})`);
  // The PubSub publishes on the promoted standby and its subscriber hears of it.
  await until('a publish after the switch', async () => {
    try {
      await pubsub.publish('failover', { type: 'after', runId: 'r', data: {} });
      return true;
    } catch (error) {
      assert.ok(error instanceof LeaseError, String(error));
      return false;
    }
  });
  await until('the event published after the switch', () => got.some((e) => e.type === 'after'), 20_000);
  // Synchronous replication: the lease granted before the switch is on the promoted standby.
  const kept = await p.getLease('steady');
  assert.equal(kept?.owner, 'keeper');
  assert.equal(kept?.fence, steadyFence);
  console.log(
    `failover: ${before} grants before, ${all.length - before} after; ${errors.length} typed errors during the switch ` +
      `(${[...new Set(errors.map((e) => (e as Error).constructor.name))].join(', ')})`,
  );
});
