/**
 * Test helpers: a fresh PostgreSQL database per test file, migrated by the Python package's own
 * `sql-lease migrate` (the TypeScript package never creates tables), and the Python interpreter.
 *
 * The server is $SQL_LEASE_TEST_DSN (default postgresql://postgres@127.0.0.1:5432/postgres);
 * the interpreter is $SQL_LEASE_PYTHON, else the repository's .venv/bin/python.
 */

import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import pg from 'pg';

const run = promisify(execFile);

/** The package's directory (tests run from dist/test/). */
export const PACKAGE_DIR = fileURLToPath(new URL('../../', import.meta.url));
/** The repository's root, where the Python package lives. */
export const REPO_DIR = fileURLToPath(new URL('../../../../', import.meta.url));
export const PYTHON = process.env.SQL_LEASE_PYTHON ?? `${REPO_DIR}.venv/bin/python`;
export const SERVER = process.env.SQL_LEASE_TEST_DSN ?? 'postgresql://postgres@127.0.0.1:5432/postgres';

/** Run the Python interpreter with `args` in the repository (more `env` if given); returns stdout. */
export async function python(args: string[], input?: string, env?: Record<string, string>): Promise<string> {
  const child = run(PYTHON, args, {
    cwd: REPO_DIR,
    encoding: 'utf8',
    timeout: 60_000,
    maxBuffer: 64 << 20,
    env: env === undefined ? process.env : { ...process.env, ...env },
  });
  if (input !== undefined) child.child.stdin?.end(input);
  const { stdout } = await child;
  return stdout;
}

function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

export interface TestDatabase {
  url: string;
  /** The database's name (for a URL to it through a pooler). */
  name: string;
  /** Empty the leases table(s) between tests. */
  truncate(table?: string): Promise<void>;
  /** A plain client on the database, for what a test needs besides the provider. */
  client(): Promise<pg.Client>;
  drop(): Promise<void>;
}

/** Create a database and migrate it with `sql-lease migrate` for each (table, schema). */
export async function createDatabase(tables: { table?: string; schema?: string }[] = [{}]): Promise<TestDatabase> {
  const name = `sql_lease_ts_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: SERVER });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE "${name}"`);
  } finally {
    await admin.end();
  }
  const url = withDatabase(SERVER, name);
  for (const { table, schema } of tables) {
    const args = ['-m', 'sql_lease', 'migrate', '--url', url];
    if (table !== undefined) args.push('--table', table);
    if (schema !== undefined) args.push('--schema', schema);
    await python(args);
  }
  const open = async (): Promise<pg.Client> => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    return client;
  };
  return {
    url,
    name,
    client: open,
    async truncate(table = 'leases') {
      const client = await open();
      try {
        await client.query(`TRUNCATE ${table}`);
      } finally {
        await client.end();
      }
    },
    async drop() {
      const dropper = new pg.Client({ connectionString: SERVER });
      await dropper.connect();
      try {
        await dropper.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      } finally {
        await dropper.end();
      }
    },
  };
}

/** Run Alembic on the repository's migrations against `url` (e.g. `['downgrade', '0002']`). */
export async function alembic(url: string, args: string[]): Promise<string> {
  return python(['-m', 'alembic', '-c', 'alembic.ini', ...args], undefined, { SQL_LEASE_DATABASE_URL: url });
}

/** Resolve when `predicate()` holds (checked every few ms); fail after `ms` with `what`. */
export async function until(what: string, predicate: () => boolean | Promise<boolean>, ms = 20_000): Promise<void> {
  const deadline = performance.now() + ms;
  while (!(await predicate())) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
