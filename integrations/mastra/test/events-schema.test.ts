/**
 * Drift between the migration (revision 0003, Python/Alembic) and what this package expects:
 * the same names on both sides, the columns and types the statements use, the NOTIFY channel
 * the trigger sends on; and the start-up check that names the command to run when the
 * migration is missing.
 */

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import pg from 'pg';

import { EXPECTED_COLUMNS, LeaseSchemaError, PostgresPubSub, eventNames } from '../src/index.js';
import { alembic, createDatabase, python, type TestDatabase } from './helpers.js';

let db: TestDatabase;
const CASES: { table?: string; schema?: string }[] = [{}, { table: 'jobs', schema: 'tenant_a' }];

before(async () => {
  db = await createDatabase(CASES);
});

after(async () => {
  await db.drop();
});

test('event object names are derived as the Python migration derives them', async () => {
  const cases: [string, string | undefined][] = [
    ['leases', undefined],
    ['jobs', 'tenant_a'],
    ['t'.repeat(40), 's'.repeat(40)], // a channel name past 63 bytes is hashed
  ];
  const script =
    'import json, sys\nfrom sql_lease._migrating.event_names import event_names\n' +
    'out = []\nfor t, s in json.loads(sys.argv[1]):\n    n = event_names(t, s)\n' +
    '    out.append({"events": n.events, "topics": n.topics, "groups": n.groups, "claims": n.claims,' +
    ' "idSequence": n.id_sequence, "stampFunction": n.stamp_function, "channel": n.channel})\n' +
    'print(json.dumps(out))';
  const fromPython = JSON.parse(await python(['-c', script, JSON.stringify(cases.map(([t, s]) => [t, s ?? null]))]));
  assert.deepEqual(
    cases.map(([t, s]) => eventNames(t, s)),
    fromPython,
  );
});

test('the migrated tables have the columns and types the statements use', async () => {
  const client = await db.client();
  try {
    for (const { table = 'leases', schema = 'public' } of CASES) {
      const names = eventNames(table, schema === 'public' ? undefined : schema);
      for (const kind of ['events', 'topics', 'groups', 'claims'] as const) {
        const { rows } = await client.query<{ attname: string; type: string }>(
          `SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type FROM pg_attribute a
           WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`,
          [`"${schema}"."${names[kind]}"`],
        );
        assert.deepEqual(Object.fromEntries(rows.map((r) => [r.attname, r.type])), EXPECTED_COLUMNS[kind], `${schema}.${names[kind]}`);
      }
    }
  } finally {
    await client.end();
  }
});

test("an insert notifies on the channel the PubSub listens to, with the topic", async () => {
  for (const { table, schema } of CASES) {
    const ps = new PostgresPubSub({ connectionString: db.url }, { table, schema });
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    try {
      await listener.query(`LISTEN "${ps.channel}"`);
      const heard = new Promise<string | undefined>((resolve) => listener.once('notification', (m) => resolve(m.payload)));
      const writer = await db.client();
      const qualified = `"${schema ?? 'public'}"."${eventNames(table ?? 'leases', schema).events}"`;
      await writer.query(`INSERT INTO ${qualified} (topic, payload) VALUES ('raw-topic', '{}')`);
      await writer.end();
      assert.equal(await heard, 'raw-topic');
      await ps.ready();
    } finally {
      await listener.end();
      await ps.close();
    }
  }
});

test('without revision 0003 the PubSub refuses to start and says what to run', async () => {
  const other = await createDatabase(CASES);
  try {
    await alembic(other.url, ['downgrade', '0002']);
    await alembic(other.url, ['-x', 'table=jobs', '-x', 'schema=tenant_a', 'downgrade', '0002']);
    for (const { table, schema } of CASES) {
      const ps = new PostgresPubSub({ connectionString: other.url }, { table, schema });
      await assert.rejects(ps.ready(), (error: unknown) => {
        assert.ok(error instanceof LeaseSchemaError, String(error));
        assert.match(error.message, /revision 0002/);
        assert.match(error.message, /needs revision 0003/);
        assert.match(error.message, /sql-lease migrate --url \.\.\./);
        if (table !== undefined) assert.match(error.message, /--table jobs --schema tenant_a/);
        return true;
      });
      await assert.rejects(ps.publish('t', { type: 'x', runId: 'r', data: null }), LeaseSchemaError);
      await ps.close();
    }
    await alembic(other.url, ['upgrade', 'head']);
    const ps = new PostgresPubSub({ connectionString: other.url });
    await ps.ready(); // migrated now: the same code starts
    await ps.close();
  } finally {
    await other.drop();
  }
});
