// Regenerate src/catalogue.json from the Python package: `npm run catalogue`.
// The interpreter is $SQL_LEASE_PYTHON, else the repository's .venv/bin/python.
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const here = new URL('..', import.meta.url);
const python = process.env.SQL_LEASE_PYTHON ?? fileURLToPath(new URL('../../.venv/bin/python', here));
const text = execFileSync(python, ['-m', 'sql_lease', 'sql', '--json'], {
  cwd: fileURLToPath(new URL('../..', here)),
  encoding: 'utf8',
});
writeFileSync(new URL('src/catalogue.json', here), text);
console.log('wrote src/catalogue.json');
