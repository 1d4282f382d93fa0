/**
 * Python (sql_lease.SqlLeaseProvider) and Node (PostgresLeaseProvider) processes on one leases
 * table: racing on hot keys with short TTLs, every grant recorded in database time, zero
 * overlaps and fences strictly increasing (once with the Node processes behind a real PgBouncer in
 * transaction pooling); transfers from one language renewed by the other; and long keys and lone
 * surrogates in keys and owners addressing the same leases from both.
 */

import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { mapLongKey, PostgresLeaseProvider } from '../src/index.js';
import { checkHistory, type HistoryEvent } from './history.js';
import { createDatabase, PACKAGE_DIR, PYTHON, python, REPO_DIR, type TestDatabase } from './helpers.js';
import { startPgBouncer } from './pgbouncer.js';

const PEER = `${PACKAGE_DIR}test/py/peer.py`;
const NODE_WORKER = fileURLToPath(new URL('./workers/hammer.js', import.meta.url));
const SECONDS = 3;
const LONG = 30_000;

let db: TestDatabase;

before(async () => {
  db = await createDatabase();
});

after(async () => {
  await db.drop();
});

describe('the history checker', () => {
  const at = (op: HistoryEvent['op'], owner: string, fence: number, t: number, expires: number): HistoryEvent => ({
    op,
    key: 'k',
    owner,
    ok: true,
    lang: 'node',
    fence: String(fence),
    t,
    expires,
  });

  test('catches two live owners, a fence going back and a nameless loss', () => {
    assert.throws(() => checkHistory([at('acquire', 'a', 1, 0, 100), at('acquire', 'b', 2, 50, 150)]), /two live owners/);
    assert.throws(() => checkHistory([at('acquire', 'a', 5, 0, 100), at('acquire', 'b', 4, 200, 300)]), /fence went back/);
    assert.throws(
      () => checkHistory([{ op: 'acquire', key: 'k', owner: 'a', ok: false, lang: 'python' }]),
      /without a holder/,
    );
  });

  test('accepts a handover at the instant of a release', () => {
    const { expires: _unused, ...release } = at('release', 'a', 1, 40, 0);
    const { tenures } = checkHistory([at('acquire', 'a', 1, 0, 100), release, at('acquire', 'b', 2, 40, 140)]);
    assert.equal(tenures.get('k')?.length, 2);
  });

  test('keeps program order for ties: a re-acquire in the same millisecond can shorten the lease', () => {
    const events = [at('acquire', 'a', 1, 0, 80), at('renew', 'a', 1, 1, 81), at('acquire', 'a', 1, 1, 41)];
    assert.doesNotThrow(() => checkHistory([...events, at('acquire', 'b', 2, 45, 60)]));
    assert.throws(() => checkHistory([...events, at('acquire', 'b', 2, 40, 60)]), /two live owners/);
  });
});

interface Worker {
  child: ChildProcess;
  ready: Promise<void>;
  done: Promise<HistoryEvent[]>;
  stderr: () => string;
}

function start(command: string, args: string[], cwd: string): Worker {
  const child = spawn(command, args, { cwd, stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  let signalReady: () => void = () => undefined;
  const ready = new Promise<void>((resolve) => {
    signalReady = resolve;
  });
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    out += chunk;
    if (out.startsWith('ready\n')) signalReady();
  });
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
    err += chunk;
  });
  const killer = setTimeout(() => child.kill('SIGKILL'), 120_000);
  const done = new Promise<HistoryEvent[]>((resolve, reject) => {
    child.on('close', (code) => {
      clearTimeout(killer);
      if (code !== 0) return reject(new Error(`${command} ${args.join(' ')} exited ${code}: ${err}`));
      const lines = out.trim().split('\n');
      resolve(JSON.parse(lines[lines.length - 1]!) as HistoryEvent[]);
    });
  });
  // A worker that dies before it is ready must not leave the test waiting.
  done.catch(() => signalReady());
  return { child, ready, done, stderr: () => err.trim() };
}

test('Python and Node processes racing on hot keys never see two live owners', () => race(db.url));

test('Node processes through PgBouncer (transaction pooling) racing Python processes direct never see two live owners', async () => {
  const bouncer = await startPgBouncer('transaction', 4);
  try {
    await race(bouncer.url(db.name), 'transaction');
  } finally {
    await bouncer.stop();
  }
});

/** Two Python and two Node processes on three hot keys; the Node ones on `nodeUrl` (with `pooler`). */
async function race(nodeUrl: string, pooler?: 'transaction'): Promise<void> {
  const run = randomBytes(4).toString('hex');
  const keys = JSON.stringify([`${run}\0hot\0a`, `${run}\0hot\0b`, `${run}\0hot`]);
  const workers = [
    start(PYTHON, [PEER, 'hammer', db.url, 'py0', String(SECONDS), '100', keys], REPO_DIR),
    start(PYTHON, [PEER, 'hammer', db.url, 'py1', String(SECONDS), '101', keys], REPO_DIR),
    start(process.execPath, [NODE_WORKER, nodeUrl, 'js0', String(SECONDS), '200', keys, pooler ?? ''], PACKAGE_DIR),
    start(process.execPath, [NODE_WORKER, nodeUrl, 'js1', String(SECONDS), '201', keys, pooler ?? ''], PACKAGE_DIR),
  ];
  await Promise.all(workers.map((w) => w.ready));
  for (const w of workers) w.child.stdin!.end('go\n');
  const events = (await Promise.all(workers.map((w) => w.done))).flat();

  let checked: ReturnType<typeof checkHistory>;
  try {
    checked = checkHistory(events);
  } catch (error) {
    const dump = join(tmpdir(), `sql-lease-race-${run}.json`);
    writeFileSync(dump, JSON.stringify(events, null, 1));
    throw new Error(`${(error as Error).message} (events in ${dump})`, { cause: error });
  }
  const { tenures, failed } = checked;
  const all = [...tenures.values()].flat();
  const count = (op: string, ok: boolean): number => events.filter((e) => e.op === op && e.ok === ok).length;
  const stats = JSON.stringify({
    tenures: all.length,
    failed,
    transfers: count('transfer', true),
    releases: count('release', true),
    lostRenewals: count('renew', false),
  });
  // Both languages held the keys, and the keys changed hands between them both ways.
  let nodeToPython = 0;
  let pythonToNode = 0;
  for (const items of tenures.values()) {
    for (let i = 1; i < items.length; i++) {
      if (items[i - 1]!.lang === 'node' && items[i]!.lang === 'python') nodeToPython++;
      if (items[i - 1]!.lang === 'python' && items[i]!.lang === 'node') pythonToNode++;
    }
  }
  assert.ok(nodeToPython > 0 && pythonToNode > 0, `no handover between languages: ${stats}`);
  // Failed acquires named holders of the other language too.
  const crossNamed = events.filter((e) => !e.ok && e.op === 'acquire' && e.holder?.startsWith(e.lang === 'node' ? 'py' : 'js'));
  assert.ok(crossNamed.length > 0, `no acquire lost to the other language: ${stats}`);
  const reruns = workers.map((w) => w.stderr()).filter(Boolean).join('; ');
  console.log(`cross-language race${pooler ? ' (node through pgbouncer)' : ''}: ${stats}, node->python ${nodeToPython}, python->node ${pythonToNode}; ${reruns}`);
}

async function pythonOps(calls: unknown[][]): Promise<unknown[]> {
  return JSON.parse(await python([PEER, 'ops', db.url], JSON.stringify(calls))) as unknown[];
}

test('a Python transfer to an owner that Node then renews, and the reverse', async () => {
  const provider = new PostgresLeaseProvider({ connectionString: db.url });
  try {
    const key = 'thread\0from-node';
    const first = await provider.acquireFencedLease(key, 'node-a', LONG);
    assert.ok(first.acquired);
    const [moved, lease] = (await pythonOps([
      ['transfer_lease', key, 'node-a', 'py-b', LONG],
      ['get_lease', key],
    ])) as [boolean, { owner: string; fence: string }];
    assert.equal(moved, true);
    assert.equal(lease.owner, 'py-b');
    assert.ok(BigInt(lease.fence) > first.fence);
    assert.equal(await provider.renewLease(key, 'py-b', LONG), true);
    assert.equal(await provider.renewLease(key, 'node-a', LONG), false);
    assert.equal((await provider.getLease(key))?.fence, BigInt(lease.fence));

    const back = 'thread\0from-python';
    const [won] = (await pythonOps([['acquire_lease', back, 'py-c', LONG]])) as [{ acquired: boolean; fence: string }];
    assert.equal(won.acquired, true);
    assert.equal(await provider.transferLease(back, 'py-c', 'node-d', LONG), true);
    const [renewed, renewedByOld, owner, taken] = (await pythonOps([
      ['renew_lease', back, 'node-d', LONG],
      ['renew_lease', back, 'py-c', LONG],
      ['get_lease_owner', back],
      ['acquire_lease', back, 'py-e', LONG],
    ])) as [boolean, boolean, string, { acquired: boolean; owner: string; fence: string }];
    assert.deepEqual([renewed, renewedByOld, owner], [true, false, 'node-d']);
    assert.deepEqual([taken.acquired, taken.owner], [false, 'node-d']);
    assert.ok(BigInt(taken.fence) > BigInt(won.fence));
  } finally {
    await provider.close();
  }
});

test('long keys and lone surrogates in keys and owners address the same leases from Node and Python', async () => {
  const provider = new PostgresLeaseProvider({ connectionString: db.url });
  try {
    const long = 'resource\0' + '\u4e2d'.repeat(1300) + '\ud800'; // 3,913 bytes: mapped
    const loneOwner = 'run-\udfff';
    assert.ok((await provider.acquireLease(long, loneOwner, LONG)).acquired);
    const [mapped] = (await pythonOps([['map_long_key', long]])) as [string];
    assert.equal(mapped, mapLongKey(long));
    assert.ok(Buffer.byteLength(mapped) <= 1024);
    const [renewed, renewedByOther, moved, owner] = (await pythonOps([
      ['renew_lease', mapped, loneOwner, LONG],
      ['renew_lease', mapped, 'run-\ufffd', LONG],
      ['transfer_lease', mapped, loneOwner, 'py-x', LONG],
      ['get_lease_owner', mapped],
    ])) as [boolean, boolean, boolean, string];
    assert.deepEqual([renewed, renewedByOther, moved, owner], [true, false, true, 'py-x']);
    assert.equal(await provider.getLeaseOwner(long), 'py-x');

    const lone = 'thread\0\udc00';
    const [won] = (await pythonOps([['acquire_lease', lone, 'py-y', LONG]])) as [{ acquired: boolean }];
    assert.equal(won.acquired, true);
    assert.deepEqual(await provider.acquireLease(lone, 'node', LONG), { acquired: false, owner: 'py-y' });
    assert.equal(await provider.getLeaseOwner('thread\0\ufffd'), undefined);
    await pythonOps([['release_lease', lone, 'py-y']]);
    assert.ok((await provider.acquireLease(lone, 'node-\ud800', LONG)).acquired);
    const [again, byOther] = (await pythonOps([
      ['renew_lease', lone, 'node-\ud800', LONG],
      ['renew_lease', lone, 'node-\udc00', LONG],
    ])) as [boolean, boolean];
    assert.deepEqual([again, byOther], [true, false]);
  } finally {
    await provider.close();
  }
});
