/**
 * A real PgBouncer (Debian's `pgbouncer`, or $SQL_LEASE_PGBOUNCER) in front of the test server,
 * on a free loopback port, for the pooler tests. As root it runs as the `postgres` system user
 * (PgBouncer refuses to run as root); trust authentication on both sides, as the test server.
 */

import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import pg from 'pg';

import { SERVER, sleep } from './helpers.js';

function binary(): string {
  const given = process.env.SQL_LEASE_PGBOUNCER;
  if (given) return given;
  for (const candidate of ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer']) if (existsSync(candidate)) return candidate;
  throw new Error('pgbouncer not found: apt-get install -y pgbouncer');
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address !== null ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

export interface Bouncer {
  /** A connection string for `database` through the pooler. */
  url(database: string): string;
  stop(): Promise<void>;
}

/** Start PgBouncer in `mode` and wait until a query through it answers. */
export async function startPgBouncer(mode: 'transaction' | 'session', poolSize = 10): Promise<Bouncer> {
  const server = new URL(SERVER);
  const dir = mkdtempSync(join(tmpdir(), 'sql_lease_ts_pgbouncer_'));
  const port = await freePort();
  const settings = [
    '[databases]',
    `* = host=${server.hostname} port=${server.port || '5432'}`,
    '[pgbouncer]',
    'listen_addr = 127.0.0.1',
    `listen_port = ${port}`,
    "unix_socket_dir = ''",
    'auth_type = trust',
    `auth_file = ${join(dir, 'userlist.txt')}`,
    `pool_mode = ${mode}`,
    `default_pool_size = ${poolSize}`,
    'max_client_conn = 500',
    `logfile = ${join(dir, 'pgbouncer.log')}`,
    `pidfile = ${join(dir, 'pgbouncer.pid')}`,
  ];
  writeFileSync(join(dir, 'pgbouncer.ini'), settings.join('\n') + '\n');
  writeFileSync(join(dir, 'userlist.txt'), '"postgres" ""\n');
  const asRoot = process.getuid?.() === 0;
  let ids: { uid: number; gid: number } | undefined;
  if (asRoot) {
    ids = {
      uid: Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' })),
      gid: Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' })),
    };
    for (const file of ['', 'pgbouncer.ini', 'userlist.txt']) chownSync(join(dir, file), ids.uid, ids.gid);
  }
  const child: ChildProcess = spawn(binary(), [join(dir, 'pgbouncer.ini')], { cwd: dir, stdio: 'ignore', ...ids });
  const url = (database: string): string => `postgresql://postgres@127.0.0.1:${port}/${database}`;
  const stop = async (): Promise<void> => {
    if (child.exitCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 15_000;
  for (;;) {
    const client = new pg.Client({ connectionString: url('postgres'), connectionTimeoutMillis: 2_000 });
    try {
      await client.connect();
      await client.query('SELECT 1');
      await client.end();
      return { url, stop };
    } catch (error) {
      await client.end().catch(() => undefined);
      if (child.exitCode !== null || Date.now() > deadline) {
        await stop();
        throw new Error(`pgbouncer did not start: ${String(error)}`);
      }
      await sleep(50);
    }
  }
}
