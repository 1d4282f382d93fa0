/**
 * Pooler mode calls the table's server functions (migration 0005), schema-qualified with typed
 * arguments, as the Python pooler mode does: checked on the wire (a pool whose clients record
 * what they send), against a database without the functions (plain statements, one warning),
 * one that loses them while in use, look-alike overloads planted beside them, and a pooled
 * server session that another client left with a temporary `leases` table and its own
 * search_path (the real table is still the one used).
 */

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import pg from 'pg';

import { PostgresLeaseProvider, LeaseSchemaError } from '../src/index.js';
import { alembic, createDatabase, type TestDatabase } from './helpers.js';
import { startPgBouncer, type Bouncer } from './pgbouncer.js';

let bouncer: Bouncer;
const dbs: TestDatabase[] = [];
const open: { close(): Promise<void> }[] = [];
const warnings: Error[] = [];
const onWarning = (w: Error): void => {
  if ((w as { code?: string }).code === 'SQL_LEASE_POOLER_PLAIN') warnings.push(w);
};

/** A pool through the bouncer whose clients record every query text they send. */
function recordingPool(url: string, max = 4): { pool: pg.Pool; sent: string[] } {
  const sent: string[] = [];
  class Recording extends pg.Client {
    override query(...args: unknown[]): never {
      const first = args[0] as { text?: string } | string;
      sent.push(typeof first === 'string' ? first : String(first.text));
      return (super.query as (...a: unknown[]) => never)(...args);
    }
  }
  const pool = new pg.Pool({ connectionString: url, max, Client: Recording });
  open.push({ close: () => pool.end() });
  return { pool, sent };
}

async function database(tables?: { table?: string; schema?: string }[]): Promise<TestDatabase> {
  const db = await createDatabase(tables);
  dbs.push(db);
  return db;
}

async function exercise(p: PostgresLeaseProvider, key = 'k'): Promise<void> {
  assert.equal((await p.acquireLease(key, 'a', 30_000)).acquired, true);
  assert.equal((await p.acquireLease(key, 'b', 30_000)).owner, 'a');
  assert.equal((await p.acquireLease(key, 'b', 30_000)).owner, 'a'); // contended: the holder read
  assert.equal(await p.getLeaseOwner(key), 'a');
  const fence = (await p.getLease(key))?.fence;
  assert.equal((await p.renew(key, 'a', 30_000))?.fence, fence);
  assert.equal(await p.renewLease(key, 'a', 30_000), true);
  assert.equal(await p.transferLease(key, 'a', 'b', 30_000), true);
  await p.releaseLease(key, 'b');
  assert.equal(await p.getLeaseOwner(key), undefined);
}

before(async () => {
  process.on('warning', onWarning);
  bouncer = await startPgBouncer('transaction', 1);
});

after(async () => {
  process.off('warning', onWarning);
  await Promise.all(open.map((p) => p.close()));
  await bouncer.stop();
  await Promise.all(dbs.map((db) => db.drop()));
});

test('every hot statement goes as a schema-qualified call with typed arguments', async () => {
  const db = await database([{}, { table: 'jobs', schema: 'tenant_a' }]);
  for (const [options, home, table] of [
    [{}, 'public', 'leases'],
    [{ table: 'jobs', schema: 'tenant_a' }, 'tenant_a', 'jobs'],
  ] as const) {
    const { pool, sent } = recordingPool(bouncer.url(db.name));
    const p = new PostgresLeaseProvider({ pool }, { ...options, pooler: 'transaction' });
    open.push(p);
    await exercise(p);
    const calls = sent.filter((q) => q.includes(`FROM "${home}"."${table}_`));
    for (const name of ['acquire', 'holder', 'get_owner', 'get_lease', 'renew', 'transfer', 'release']) {
      assert.ok(
        calls.some((q) => q.includes(`SELECT * FROM "${home}"."${table}_${name}"(`)),
        `no call of ${table}_${name}:\n${sent.join('\n')}`,
      );
    }
    assert.ok(calls.some((q) => /\('\\x[0-9a-f]+'::pg_catalog\.bytea, /.test(q.replace(/E'\\\\x/g, "'\\x"))), calls.join('\n'));
    assert.ok(calls.every((q) => q.startsWith('SET LOCAL statement_timeout = ')), calls.join('\n'));
    // The session settings are pinned in the same query as the call (hostile.test.ts).
    assert.ok(calls.every((q) => q.includes("SET LOCAL DateStyle = 'ISO, MDY';")), calls.join('\n'));
    // No plain statement on the table went out, and nothing names the table unqualified.
    assert.deepEqual(
      sent.filter((q) => /\b(UPDATE|INSERT INTO)\b/.test(q) || new RegExp(`FROM "${table}"`).test(q)),
      [],
    );
  }
  assert.deepEqual(warnings, []);
});

test('look-alike overloads planted next to the functions are never called', async () => {
  const db = await database();
  const admin = await db.client();
  try {
    // text overloads: an untyped literal argument would prefer them over bytea.
    await admin.query(`CREATE FUNCTION public.leases_get_owner(text) RETURNS TABLE(owner bytea)
      LANGUAGE sql AS $$ SELECT 'evil'::bytea $$`);
    await admin.query(`CREATE FUNCTION public.leases_acquire(text, text, text)
      RETURNS TABLE(acquired boolean, fence bigint, expires_at timestamptz, holder bytea)
      LANGUAGE sql AS $$ SELECT true, 1::bigint, now() + interval '1 hour', NULL::bytea $$`);
  } finally {
    await admin.end();
  }
  const p = new PostgresLeaseProvider({ connectionString: bouncer.url(db.name) }, { pooler: 'transaction' });
  open.push(p);
  assert.equal(await p.getLeaseOwner('k'), undefined);
  assert.equal((await p.acquireLease('k', 'a', 30_000)).acquired, true);
  assert.equal((await p.acquireLease('k', 'b', 30_000)).acquired, false); // the planted one always grants
  assert.equal(await p.getLeaseOwner('k'), 'a');
});

test('without the functions (revision 0004) the statements go plain and qualified, with one warning', async () => {
  const db = await database();
  await alembic(db.url, ['downgrade', '0004']);
  const { pool, sent } = recordingPool(bouncer.url(db.name));
  const p = new PostgresLeaseProvider({ pool }, { pooler: 'transaction' });
  open.push(p);
  await exercise(p, 'plain-1');
  await exercise(p, 'plain-2');
  assert.equal(warnings.length, 1, warnings.map(String).join('\n'));
  assert.match(warnings[0]!.message, /revision 0005/);
  assert.ok(!sent.some((q) => q.includes('"leases_acquire"(') && !q.includes('to_regprocedure')), sent.join('\n'));
  assert.ok(sent.some((q) => q.includes('INSERT INTO "public"."leases"')), sent.join('\n'));
  warnings.length = 0;
});

test('functions dropped while in use: the failed call goes again plain, once, and nothing is lost', async () => {
  const db = await database();
  const p = new PostgresLeaseProvider({ connectionString: bouncer.url(db.name) }, { pooler: 'transaction' });
  open.push(p);
  assert.equal((await p.acquireLease('before', 'a', 30_000)).acquired, true);
  await alembic(db.url, ['downgrade', '0004']);
  const second = await p.acquireLease('after', 'a', 30_000); // its call fails: undefined_function
  assert.equal(second.acquired, true);
  assert.equal(await p.getLeaseOwner('before'), 'a');
  assert.equal((await p.acquireLease('after', 'b', 30_000)).owner, 'a');
  assert.equal(warnings.length, 1);
  warnings.length = 0;
});

test('a temporary leases table and a search_path left on the pooled session capture nothing', async () => {
  const db = await database();
  // PgBouncer has one server connection per database here: the other client's session state is
  // exactly what the provider's next query meets.
  const hostile = new pg.Client({ connectionString: bouncer.url(db.name) });
  await hostile.connect();
  open.push({ close: () => hostile.end() });
  await hostile.query('CREATE SCHEMA IF NOT EXISTS evil');
  await hostile.query('CREATE TABLE evil.leases (LIKE public.leases INCLUDING ALL)');
  await hostile.query('CREATE TEMP TABLE leases (LIKE public.leases INCLUDING ALL)');
  await hostile.query('SET search_path = pg_temp, public');
  const p = new PostgresLeaseProvider({ connectionString: bouncer.url(db.name) }, { pooler: 'transaction', maxConnections: 1 });
  open.push(p);
  await exercise(p, 'shadowed');
  assert.equal((await p.acquireLease('shadowed', 'a', 30_000)).acquired, true);
  assert.equal(await p.getLeaseOwner('shadowed'), 'a');
  const direct = await db.client();
  try {
    const real = await direct.query("SELECT convert_from(owner, 'UTF8') AS owner FROM public.leases WHERE key = convert_to('shadowed', 'UTF8')");
    assert.deepEqual(real.rows, [{ owner: 'a' }]);
  } finally {
    await direct.end();
  }
  const temp = await hostile.query('SELECT count(*)::int AS n FROM pg_temp.leases');
  assert.deepEqual(temp.rows, [{ n: 0 }]);
  // Even a search path naming another schema with a leases table, or none, is not the one used.
  for (const path of ['evil', 'nothing_here']) {
    await hostile.query(`SET search_path = ${path}`);
    const q = new PostgresLeaseProvider({ connectionString: bouncer.url(db.name) }, { pooler: 'transaction', maxConnections: 1 });
    open.push(q);
    assert.equal((await q.acquireLease(`path-${path}`, 'a', 30_000)).acquired, true);
    const rows = await hostile.query(`SELECT (SELECT count(*)::int FROM public.leases WHERE key = convert_to('path-${path}', 'UTF8')) AS real,
      (SELECT count(*)::int FROM evil.leases) AS evil`);
    assert.deepEqual(rows.rows, [{ real: 1, evil: 0 }]);
  }
  const r = new PostgresLeaseProvider({ connectionString: bouncer.url(db.name) }, { pooler: 'transaction', schema: 'nope' });
  open.push(r);
  await assert.rejects(r.getLeaseOwner('x'), (error: unknown) => error instanceof LeaseSchemaError && /schema "nope"/.test(error.message));
  assert.deepEqual(warnings, []);
});
