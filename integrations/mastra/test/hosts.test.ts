/**
 * Host lists: the URL forms the Python library takes, checked before any I/O (no password in
 * any message), and a server that turns read-only (SQLSTATE 25006) is a typed error that drops
 * its connection, so the next call reconnects (the shared server stands in for a demoted
 * primary with `default_transaction_read_only`, as the Python test does). The real failover
 * is failover.test.ts.
 */

import assert from 'node:assert/strict';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { after, before, test } from 'node:test';

import pg from 'pg';

import { LeaseConnectionError, LeaseRangeError, PostgresLeaseProvider } from '../src/index.js';
import { parseHostList } from '../src/hosts.js';
import { describeWhere } from '../src/pool.js';
import { createDatabase, SERVER, type TestDatabase } from './helpers.js';

let db: TestDatabase;

before(async () => {
  db = await createDatabase();
});

after(async () => {
  await db.drop();
});

test('the three host list forms give the same hosts, in order, and keep the rest of the URL', () => {
  const forms = [
    'postgresql://u:p%40ss@h1:5433,h2,[::1]:5434/db?target_session_attrs=read-write&application_name=x',
    'postgres://u:p%40ss@/db?host=h1:5433&host=h2&host=[::1]:5434&target_session_attrs=read-write&application_name=x',
  ];
  for (const form of forms) {
    const list = parseHostList(form);
    assert.ok(list);
    assert.deepEqual(list.targets, [
      { host: 'h1', port: 5433 },
      { host: 'h2', port: undefined },
      { host: '::1', port: 5434 },
    ]);
    assert.equal(list.writable, 'read-write');
    assert.deepEqual(list.urls, [
      'postgresql://u:p%40ss@h1:5433/db?application_name=x',
      'postgresql://u:p%40ss@h2/db?application_name=x',
      'postgresql://u:p%40ss@[::1]:5434/db?application_name=x',
    ]);
    assert.equal(list.where, 'postgresql://u@h1:5433,h2,[::1]:5434/db');
    assert.equal(describeWhere(form), 'postgresql://u@h1:5433,h2,[::1]:5434/db');
  }
  const paired = parseHostList('postgresql://u@/db?host=a,b&port=1,2');
  assert.deepEqual(paired?.targets, [
    { host: 'a', port: 1 },
    { host: 'b', port: 2 },
  ]);
  assert.equal(paired?.writable, undefined);
  // One host, no target_session_attrs: node-postgres reads it as it is.
  assert.equal(parseHostList('postgresql://u:p@h:5432/db?sslmode=require'), undefined);
  assert.equal(parseHostList('postgresql://u@h/db?target_session_attrs=primary')?.writable, 'primary');
});

test('a malformed host list is refused at construction, before any I/O, without the password', () => {
  const bad = [
    'postgresql://u:secret@h1:5432,:5433/db',
    'postgresql://u:secret@h1:99999,h2/db',
    'postgresql://u:secret@h1:port,h2/db',
    'postgresql://u:sec@ret@h1,h2/db',
    'postgresql://u:secret@h1,h2/db?target_session_attrs=standby',
    'postgresql://u:secret@h1,h2/db?target_session_attrs=bogus',
    'postgresql://u:secret@h1,h3/db?host=h2',
    'postgresql://u:secret@/db?host=a,b,c&port=1,2',
  ];
  for (const url of bad) {
    assert.throws(
      () => new PostgresLeaseProvider({ connectionString: url }),
      (error: unknown) => error instanceof LeaseRangeError && !/secret|sec@ret/.test(error.message),
      url,
    );
  }
});

test('a host list with an unreachable first host reaches the second, and says where it failed', async () => {
  const server = new URL(SERVER);
  const dead = `127.0.0.1:1`; // nothing listens on port 1
  const url = `postgresql://${server.username}@${dead},${server.hostname}:${server.port || 5432}/${db.name}?target_session_attrs=read-write`;
  const p = new PostgresLeaseProvider({ connectionString: url }, { timeoutMs: 5_000 });
  try {
    assert.equal((await p.acquireLease('k', 'a', 30_000)).acquired, true);
    assert.equal(await p.getLeaseOwner('k'), 'a');
  } finally {
    await p.close();
  }
  const nowhere = new PostgresLeaseProvider({ connectionString: `postgresql://u:secret@${dead},127.0.0.1:2/x` }, { timeoutMs: 3_000 });
  try {
    await assert.rejects(nowhere.getLeaseOwner('k'), (error: unknown) => {
      assert.ok(error instanceof LeaseConnectionError, String(error));
      assert.match(error.message, /postgresql:\/\/u@127\.0\.0\.1:1,127\.0\.0\.1:2\/x/);
      assert.doesNotMatch(error.message, /secret/);
      return true;
    });
  } finally {
    await nowhere.close();
  }
});

test('a silent first host (accepts, never answers) takes only its share of the deadline', async () => {
  const sockets: Socket[] = [];
  const silent = createServer((socket) => sockets.push(socket)); // accepts, then says nothing
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  const port = (silent.address() as AddressInfo).port;
  const server = new URL(SERVER);
  const url = `postgresql://${server.username}@127.0.0.1:${port},${server.hostname}:${server.port || 5432}/${db.name}`;
  const p = new PostgresLeaseProvider({ connectionString: url }, { timeoutMs: 3_000 });
  try {
    const started = performance.now();
    assert.equal(await p.getLeaseOwner('silent'), undefined);
    const took = performance.now() - started;
    assert.ok(took >= 1_400 && took < 3_000, `${took} ms`); // 1.5 s on the silent host, then the next
  } finally {
    await p.close();
    for (const socket of sockets) socket.destroy();
    silent.close();
  }
});

async function setReadOnly(on: boolean): Promise<void> {
  const admin = new pg.Client({ connectionString: SERVER }); // not the database made read-only
  await admin.connect();
  try {
    await admin.query(`ALTER DATABASE "${db.name}" ${on ? 'SET default_transaction_read_only = on' : 'RESET ALL'}`);
  } finally {
    await admin.end();
  }
}

test('a server that turned read-only: a typed error, nothing written, and the next call reconnects', async () => {
  const p = new PostgresLeaseProvider({ connectionString: db.url }, { timeoutMs: 5_000, maxConnections: 1 });
  try {
    await setReadOnly(true);
    await assert.rejects(p.acquireLease('ro', 'a', 30_000), (error: unknown) => {
      assert.ok(error instanceof LeaseConnectionError, String(error));
      assert.equal(error.outcomeUnknown, false); // refused before anything applied
      assert.equal(error.sqlState, '25006');
      assert.match(error.message, /read-only.*target_session_attrs=read-write/);
      return true;
    });
    await setReadOnly(false);
    // The read-only connection was dropped: a kept one would refuse again (the setting is the
    // session's from its start).
    assert.equal((await p.acquireLease('ro', 'b', 30_000)).acquired, true);
    assert.equal(await p.getLeaseOwner('ro'), 'b');
  } finally {
    await setReadOnly(false);
    await p.close();
  }
});
