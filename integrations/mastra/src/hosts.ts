/**
 * Host lists, as libpq and the Python library take them: `postgresql://u@h1:5432,h2:5433/db`,
 * `postgresql://u@/db?host=h1:5432&host=h2:5433` or `?host=h1,h2&port=5432,5433`, with
 * `target_session_attrs=read-write` (or `primary`) to connect only to a writable server.
 * node-postgres knows none of these, so a pool for such a URL gets a client class of its own:
 *
 * - each new connection goes to the host that last worked (the first at the start); when that
 *   fails, or the server it reached is read-only (`SHOW transaction_read_only`, what libpq asks
 *   for read-write; `pg_is_in_recovery()` for primary), the next host in the list is current
 *   and the connection fails as a connection error (nothing was sent), so the executor tries
 *   again at once, as many times as there are hosts;
 * - a write refused with SQLSTATE 25006 (the server turned read-only: a demoted primary, or a
 *   standby) drops its connection and moves on too (`serverReadOnly`), so the next call
 *   reconnects to the writable one.
 *
 * URLs without a list or those parameters are handed to node-postgres untouched.
 */

import pg from 'pg';

import { LeaseRangeError } from './errors.js';

export interface Target {
  host: string;
  port: number | undefined;
}

/** What a host list URL says. */
export interface HostList {
  targets: Target[];
  /** `read-write`/`primary`: only a writable server (resp. one not in recovery) will do. */
  writable: 'read-write' | 'primary' | undefined;
  /** One single-host connection string per target, in order (what node-postgres reads). */
  urls: string[];
  /** The list as a user reads it, without any password (for messages). */
  where: string;
}

const ATTRS = new Set(['any', 'read-write', 'primary']);
const READ_ONLY_ATTRS = new Set(['read-only', 'standby', 'prefer-standby']);

/** The port of `text` (1-65535), or undefined for none; never quotes the URL. */
function port(text: string): number | undefined {
  if (text === '') return undefined;
  if (!/^\d+$/.test(text)) {
    throw new LeaseRangeError("a port in the database URL is not a number (percent-encode an '@' in the password as %40)");
  }
  const n = Number(text);
  if (n < 1 || n > 65535) throw new LeaseRangeError('a port in the database URL is out of range: use 1 to 65535');
  return n;
}

/** `host`, `host:port`, `[v6]` or `[v6]:port`. */
function target(token: string): Target {
  if (token.startsWith('[')) {
    const close = token.indexOf(']');
    const tail = token.slice(close + 1);
    if (close < 0 || (tail !== '' && !tail.startsWith(':'))) throw new LeaseRangeError("the database URL has an unclosed '[' in a host");
    return { host: token.slice(1, close), port: port(tail.slice(1)) };
  }
  const colon = token.lastIndexOf(':');
  const host = colon < 0 ? token : token.slice(0, colon);
  if (host === '') throw new LeaseRangeError("the database URL's host list has an empty host");
  return { host: decodeURIComponent(host), port: colon < 0 ? undefined : port(token.slice(colon + 1)) };
}

/**
 * The host list of `connectionString`, or undefined when node-postgres can take it as it is
 * (one host and no `target_session_attrs`). Throws `LeaseRangeError` for a malformed list.
 */
export function parseHostList(connectionString: string): HostList | undefined {
  const scheme = /^(postgres|postgresql):\/\//i.exec(connectionString);
  if (scheme === null) return undefined;
  const rest = connectionString.slice(scheme[0].length);
  const end = rest.search(/[/?#]/);
  const authority = end < 0 ? rest : rest.slice(0, end);
  const tail = end < 0 ? '' : rest.slice(end);
  const at = authority.lastIndexOf('@');
  const userinfo = at < 0 ? '' : authority.slice(0, at);
  const hostPart = authority.slice(at + 1);
  if (userinfo.includes('@')) {
    throw new LeaseRangeError("the database URL has more than one '@': percent-encode every '@' but the one before the host as %40");
  }
  const query = tail.indexOf('?') < 0 ? '' : tail.slice(tail.indexOf('?') + 1).split('#')[0]!;
  const path = tail.split(/[?#]/)[0] ?? '';
  const params = new URLSearchParams(query);
  const attrs = params.get('target_session_attrs') ?? undefined;
  const queryHosts = params.getAll('host');
  const listed = hostPart.includes(',');
  if (!listed && queryHosts.length <= 1 && !(queryHosts[0] ?? '').includes(',') && attrs === undefined) return undefined;
  if (attrs !== undefined && READ_ONLY_ATTRS.has(attrs)) {
    throw new LeaseRangeError(`target_session_attrs=${attrs} cannot carry a lease provider's writes: use read-write`);
  }
  if (attrs !== undefined && !ATTRS.has(attrs)) {
    throw new LeaseRangeError('the database URL\'s target_session_attrs must be one of any, read-write, primary');
  }
  let targets: Target[];
  if (queryHosts.length > 0) {
    if (hostPart !== '') throw new LeaseRangeError('the database URL lists hosts both before its path and in host=');
    const hosts = queryHosts.flatMap((h) => h.split(','));
    const ports = params.getAll('port').flatMap((p) => p.split(','));
    if (ports.length > 1 && ports.length !== hosts.length) {
      throw new LeaseRangeError('the database URL gives a different number of hosts and ports');
    }
    targets = hosts.map((h, i) => {
      const t = h.startsWith('/') ? { host: h, port: undefined } : target(h);
      const p = ports.length === 0 ? undefined : port(ports.length === 1 ? ports[0]! : ports[i]!);
      return { host: t.host, port: t.port ?? p };
    });
  } else {
    targets = hostPart === '' ? [{ host: 'localhost', port: undefined }] : hostPart.split(',').map(target);
  }
  for (const name of ['host', 'port', 'target_session_attrs']) params.delete(name);
  const rest_ = params.toString();
  const user = userinfo === '' ? '' : `${userinfo}@`;
  const urls = targets.map(({ host, port: p }) => {
    const where = host.startsWith('/') ? '' : host.includes(':') ? `[${host}]` : encodeURIComponent(host);
    const socket = host.startsWith('/') ? [`host=${encodeURIComponent(host)}`] : [];
    const q = [...socket, ...(rest_ ? [rest_] : [])].join('&');
    return `postgresql://${user}${where}${p === undefined ? '' : `:${p}`}${path}${q ? `?${q}` : ''}`;
  });
  const shownUser = userinfo === '' ? '' : `${decodeURIComponent(userinfo.split(':')[0]!)}@`;
  const shown = targets.map(({ host, port: p }) => `${host.includes(':') ? `[${host}]` : host}${p === undefined ? '' : `:${p}`}`);
  return {
    targets,
    writable: attrs === 'read-write' || attrs === 'primary' ? attrs : undefined,
    urls,
    where: `postgresql://${shownUser}${shown.join(',')}${path}`,
  };
}

/** A server that is not writable, met while connecting with target_session_attrs (a connection error: nothing was sent). */
export class ServerNotWritableError extends Error {
  readonly code = 'SQL_LEASE_NOT_WRITABLE';
}

/** Which host new connections go to: the one that last worked, moved on by each failure. */
class Cursor {
  #index = 0;
  readonly #count: number;

  constructor(count: number) {
    this.#count = count;
  }

  get index(): number {
    return this.#index;
  }

  /** The connection to host `index` failed or found it read-only: the next host is current. */
  failed(index: number): void {
    if (index === this.#index) this.#index = (index + 1) % this.#count;
  }
}

const cursors = new WeakMap<pg.Client, { cursor: Cursor; index: number }>();
const attempts = new WeakMap<pg.Pool, number>();

/**
 * A `pg.Client` class (extending `Base`) whose instances connect to the current host of `list`
 * and, with `target_session_attrs`, only to a writable server (see the module).
 */
export function hostListClient(list: HostList, Base: typeof pg.Client): typeof pg.Client {
  const cursor = new Cursor(list.targets.length);
  const check =
    list.writable === 'primary'
      ? 'SELECT NOT pg_catalog.pg_is_in_recovery() AS writable'
      : "SELECT pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'off' AS writable";
  class HostListClient extends Base {
    readonly #index: number;

    constructor(config?: string | pg.ClientConfig) {
      const index = cursor.index;
      super({ ...(typeof config === 'string' ? {} : config), connectionString: list.urls[index] });
      this.#index = index;
      cursors.set(this, { cursor, index });
    }

    override connect(): Promise<pg.Client>;
    override connect(callback: (err: Error | null, client?: pg.Client) => void): void;
    override connect(callback?: (err: Error | null, client?: pg.Client) => void): Promise<pg.Client> | undefined {
      const done = this.#connectWritable().then(() => this);
      if (callback === undefined) return done;
      done.then(() => callback(null, this), (error: Error) => callback(error));
      return undefined;
    }

    async #connectWritable(): Promise<void> {
      try {
        await super.connect();
      } catch (error) {
        cursor.failed(this.#index);
        throw error;
      }
      if (list.writable === undefined) return;
      let writable: unknown;
      try {
        writable = (await this.query<{ writable: boolean }>(check)).rows[0]?.writable;
      } catch (error) {
        cursor.failed(this.#index);
        await this.end().catch(() => undefined);
        throw error;
      }
      if (writable !== true) {
        cursor.failed(this.#index);
        await this.end().catch(() => undefined);
        const t = list.targets[this.#index]!;
        throw new ServerNotWritableError(
          `connection to ${t.host}${t.port === undefined ? '' : `:${t.port}`} refused: the server is not writable ` +
            `(target_session_attrs=${list.writable}); trying the next host`,
        );
      }
    }
  }
  return HostListClient;
}

const listClasses = new Map<string, typeof pg.Client>();

/**
 * A client of its own for `connectionString` (the PubSub's LISTEN connection): a host list's
 * client class is kept per connection string, so each reconnect goes on from the host that
 * last worked or the next one.
 */
export function newClient(connectionString: string, config: pg.ClientConfig): pg.Client {
  const list = parseHostList(connectionString);
  if (list === undefined) return new pg.Client({ ...config, connectionString });
  let Client = listClasses.get(connectionString);
  if (Client === undefined) {
    if (listClasses.size >= 64) listClasses.clear();
    Client = hostListClient(list, pg.Client);
    listClasses.set(connectionString, Client);
  }
  return new Client(config);
}

/** Remember that `pool` spreads its connections over `hosts` hosts (the executor's tries). */
export function registerHosts(pool: pg.Pool, hosts: number): void {
  attempts.set(pool, hosts);
}

/** How many times a checkout of `pool` that failed to connect may be tried again. */
export function connectRetries(pool: pg.Pool): number {
  return Math.max(1, attempts.get(pool) ?? 1);
}

/** A statement on `client` was refused with SQLSTATE 25006: its host is no longer current. */
export function serverReadOnly(client: unknown): void {
  const found = cursors.get(client as pg.Client);
  found?.cursor.failed(found.index);
}
