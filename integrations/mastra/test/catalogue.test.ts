/**
 * Drift: the committed catalogue.json must be what the Python package exports now, and the
 * statements rendered from it must be, byte for byte, the ones the Python provider builds.
 * Also: the committed lockfile records no registry addresses.
 */

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { buildStatements, catalogue, type StatementName } from '../src/catalogue.js';
import { PACKAGE_DIR, python } from './helpers.js';

const COMMITTED = `${PACKAGE_DIR}src/catalogue.json`;

test('the committed catalogue is what `python -m sql_lease sql --json` prints now', async () => {
  const now = await python(['-m', 'sql_lease', 'sql', '--json']);
  const committed = readFileSync(COMMITTED, 'utf8');
  assert.ok(
    committed === now,
    'src/catalogue.json is stale: run `npm run catalogue` (it runs `python -m sql_lease sql --json`), then `npm run build`',
  );
  assert.deepEqual(catalogue, JSON.parse(committed), 'the build is older than src/catalogue.json: run `npm run build`');
});

const RENDER = `
import json, sys
from sql_lease._export import exported_statements
from sql_lease.backends.postgres.catalogue import build_catalogue
out = []
for table, schema in json.loads(sys.argv[1]):
    s = build_catalogue(table, schema)
    names = json.loads(sys.argv[2])
    built = exported_statements(s)
    out.append({n: built[n].sql for n in names} | {"table": s.table, "channel": s.channel})
print(json.dumps(out))
`;

test('rendered statements equal the Python catalogue for every naming case', async () => {
  const names: [string, string | undefined][] = [
    ['leases', undefined],
    ['jobs', 'tenant_a'],
    ['t'.repeat(40), undefined], // a channel of 50 characters: kept
    ['t'.repeat(40), 's'.repeat(40)], // a channel longer than 63: hashed
    ['_X9', 'Upper_Case'],
  ];
  const statementNames = Object.keys(catalogue.statements) as StatementName[];
  const pairs = JSON.stringify(names.map(([t, s]) => [t, s ?? null]));
  const expected = JSON.parse(await python(['-c', RENDER, pairs, JSON.stringify(statementNames)])) as Record<
    string,
    string
  >[];
  assert.equal(expected.length, names.length);
  names.forEach(([table, schema], i) => {
    const ours = buildStatements(table, schema);
    const theirs = expected[i]!;
    assert.equal(ours.table, theirs.table);
    assert.equal(ours.channel, theirs.channel);
    for (const name of statementNames) assert.equal(ours[name], theirs[name], `${name} for ${table}/${schema}`);
  });
});

test('the lockfile records no registry addresses', () => {
  const lock = JSON.parse(readFileSync(`${PACKAGE_DIR}package-lock.json`, 'utf8')) as {
    packages: Record<string, Record<string, unknown>>;
  };
  const offending: string[] = [];
  for (const [path, entry] of Object.entries(lock.packages)) {
    if ('resolved' in entry) offending.push(`${path}: resolved`);
    // Funding links (sponsor pages) are the only URLs npm records, and they are not registries.
    const { funding: _funding, ...rest } = entry;
    if (JSON.stringify(rest).includes('://')) offending.push(`${path}: a URL outside "funding"`);
  }
  assert.deepEqual(offending, []);
  assert.ok(Object.keys(lock.packages).some((p) => p.endsWith('node_modules/pg')));
});
