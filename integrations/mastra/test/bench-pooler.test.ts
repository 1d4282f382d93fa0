/**
 * The pooler benchmark's quick mode runs (a smoke test: figures are not asserted, only that
 * every cell and variant ran and the table shows them).
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { QUICK, runPoolerBench, table, VARIANTS } from '../bench/pooler.js';

test('the pooler benchmark in quick mode measures every cell in every variant', async () => {
  const result = await runPoolerBench({ ...QUICK, seconds: 0.2 });
  assert.deepEqual(Object.keys(result.cells), ['lifecycle_c1', 'read_c1', 'lifecycle_c16', 'read_c16']);
  for (const [name, cell] of Object.entries(result.cells)) {
    for (const v of VARIANTS) assert.ok(cell[v].opsPerSecond > 0, `${name} ${v}: no operation`);
    assert.equal(cell.direct.xDirect, 1);
  }
  const shown = table(result);
  for (const v of VARIANTS) assert.match(shown.split('\n')[0]!, new RegExp(` ${v}`));
  for (const name of Object.keys(result.cells)) assert.match(shown, new RegExp(`\\n  ${name} +\\d+ \\(1\\.00x\\)`));
});
