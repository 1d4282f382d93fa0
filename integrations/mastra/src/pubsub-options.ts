/**
 * `PostgresPubSub`'s options and connection, checked before any I/O: every value is validated
 * here and resolved to its default, so the rest of the PubSub reads plain numbers.
 */

import pg from 'pg';
import type { Pool } from 'pg';

import { catalogue } from './catalogue.js';
import { LeaseRangeError, LeaseTypeError } from './errors.js';
import { createPool, describeWhere, poolWhere } from './pool.js';
import { DEFAULT_TIMEOUT_MS, type ConnectionOptions, type ProviderOptions } from './provider.js';
import { newClient } from './hosts.js';
import { checkPooler, type Pooler } from './pooler.js';
import { checkIdentifier, checkMs, checkTimeout } from './validate.js';

export interface PubSubLogger {
  error(message: string, ...args: unknown[]): void;
  /** Where it says an event was parked after its last delivery attempt (default: `error`). */
  warn?(message: string, ...args: unknown[]): void;
  /** Where it says how it learns of new events (default `console.info`). */
  info?(message: string, ...args: unknown[]): void;
}

/** A logger as given: `error` may be left out when `warn` is there (Mastra's `{ debug, warn }`). */
export type PubSubLoggerOption = Partial<PubSubLogger> & ({ error: PubSubLogger['error'] } | { warn: NonNullable<PubSubLogger['warn']> });

export interface PubSubOptions extends Omit<ProviderOptions, 'logger'> {
  /** How long events are kept, in ms (default one day). */
  retentionMs?: number | undefined;
  /** How often this instance runs `cleanup()`, in ms (default 5 minutes; 0: never). */
  cleanupIntervalMs?: number | undefined;
  /** How long a group member has to ack an event before it goes to another, in ms (default 30 s). */
  ackTimeoutMs?: number | undefined;
  /** How long a nacked event waits before it is delivered again, in ms (default 100). */
  nackDelayMs?: number | undefined;
  /** How often subscribed topics are read even without a notification, in ms (default 2 s). */
  pollIntervalMs?: number | undefined;
  /** Events read per statement (default 100). */
  batchSize?: number | undefined;
  /** Where delivery failures are reported (default `console`). */
  logger?: PubSubLoggerOption | undefined;
  /**
   * How many times a consumer group delivers an event (the first delivery included) before it
   * parks it (default 5, as Mastra's `RedisStreamsPubSub`; `Infinity`: never; 0 is read as
   * `Infinity`, with a warning, as there). A parked event is kept, not deleted: its claim row
   * in `<table>_event_claims` gets `visible_at = 'infinity'` and keeps its `attempts`, until
   * the event is acked late, cleaned up with the retention or its topic cleared (see README).
   */
  maxDeliveryAttempts?: number | undefined;
  /**
   * A connection string straight to the server for the LISTEN connection, when the main one
   * goes through a transaction pooler (which cannot carry LISTEN). Without it, behind
   * `pooler: 'transaction'`, subscribed topics are read every `pollIntervalMs`.
   */
  listenConnectionString?: string | undefined;
}

export const DEFAULT_RETENTION_MS = 86_400_000;
const DEFAULTS = {
  cleanupIntervalMs: 300_000,
  ackTimeoutMs: 30_000,
  nackDelayMs: 100,
  pollIntervalMs: 2_000,
  batchSize: 100,
  maxConnections: 10,
  maxDeliveryAttempts: 5,
};

/** Every option, checked and defaulted. */
export interface Settings {
  table: string;
  schema: string | undefined;
  timeoutMs: number;
  retentionMs: number;
  cleanupIntervalMs: number;
  ackTimeoutMs: number;
  nackDelayMs: number;
  pollIntervalMs: number;
  batch: number;
  logger: PubSubLogger;
  /** Deliveries per group event before it is parked; `MAX_ATTEMPTS_OFF` for none. */
  maxDeliveryAttempts: number;
  maxConnections: number;
  pooler: Pooler | undefined;
  listenConnectionString: string | undefined;
}

/** Check `options` (throws `LeaseTypeError`/`LeaseRangeError` naming the option). */
export function settings(options: PubSubOptions): Settings {
  if (typeof options !== 'object' || options === null) throw new LeaseTypeError('options must be an object');
  const batch = options.batchSize ?? DEFAULTS.batchSize;
  if (!Number.isInteger(batch) || batch < 1 || batch > 10_000) {
    throw new LeaseRangeError(`batchSize must be an integer from 1 to 10000, not ${String(batch)}`);
  }
  const logger = checkLogger(options.logger ?? console);
  const maxDeliveryAttempts = checkAttempts(options.maxDeliveryAttempts, logger);
  const max = options.maxConnections ?? DEFAULTS.maxConnections;
  if (!Number.isInteger(max) || max < 1) throw new LeaseTypeError('maxConnections must be a positive integer');
  const listen: unknown = options.listenConnectionString;
  if (listen !== undefined && (typeof listen !== 'string' || listen === '')) {
    throw new LeaseTypeError('listenConnectionString must be a non-empty string');
  }
  return {
    table: checkIdentifier('table', options.table ?? catalogue.naming.default_table),
    schema: options.schema === undefined ? undefined : checkIdentifier('schema', options.schema),
    timeoutMs: checkTimeout('timeoutMs', options.timeoutMs ?? DEFAULT_TIMEOUT_MS),
    retentionMs: checkMs('retentionMs', options.retentionMs ?? DEFAULT_RETENTION_MS),
    cleanupIntervalMs: checkMs('cleanupIntervalMs', options.cleanupIntervalMs ?? DEFAULTS.cleanupIntervalMs, 0),
    ackTimeoutMs: checkMs('ackTimeoutMs', options.ackTimeoutMs ?? DEFAULTS.ackTimeoutMs),
    nackDelayMs: checkMs('nackDelayMs', options.nackDelayMs ?? DEFAULTS.nackDelayMs, 0),
    pollIntervalMs: checkMs('pollIntervalMs', options.pollIntervalMs ?? DEFAULTS.pollIntervalMs, 10),
    batch,
    logger,
    maxDeliveryAttempts,
    maxConnections: max,
    pooler: checkPooler(options.pooler),
    listenConnectionString: listen,
  };
}

/** The `attempts` a claim can never reach (integer column): the cap when there is none. */
export const MAX_ATTEMPTS_OFF = 2_147_483_647;

function checkLogger(given: unknown): PubSubLogger {
  const logger = given as Partial<PubSubLogger> | null;
  if (typeof logger !== 'object' || logger === null) throw new LeaseTypeError('logger must be an object');
  const error = typeof logger.error === 'function' ? logger.error : logger.warn;
  if (typeof error !== 'function') throw new LeaseTypeError('logger must have an error() or a warn() method');
  const out: PubSubLogger = { error: error.bind(logger) };
  const warn = typeof logger.warn === 'function' ? logger.warn : undefined;
  out.warn = (warn ?? error).bind(logger);
  if (typeof logger.info === 'function') out.info = logger.info.bind(logger);
  return out;
}

function checkAttempts(value: unknown, logger: PubSubLogger): number {
  if (value === undefined) return DEFAULTS.maxDeliveryAttempts;
  if (value === Infinity) return MAX_ATTEMPTS_OFF;
  if (typeof value !== 'number' || !Number.isInteger(value)) {
    throw new LeaseTypeError(`maxDeliveryAttempts must be a positive integer or Infinity, not ${String(value)}`);
  }
  if (value === 0) {
    logger.warn?.('[PostgresPubSub] maxDeliveryAttempts=0 is read as Infinity (no cap); pass Infinity instead');
    return MAX_ATTEMPTS_OFF;
  }
  if (value < 0 || value >= MAX_ATTEMPTS_OFF) {
    throw new LeaseRangeError(`maxDeliveryAttempts must be a positive integer or Infinity, not ${value}`);
  }
  return value;
}

/** The PubSub's pool: its own for a connection string (it ends it), or the caller's (never ended). */
export interface Connection {
  pool: Pool;
  ownsPool: boolean;
  connectionString: string | undefined;
  /** Where the LISTEN connection goes: `listenConnectionString`, else `connectionString`. */
  listenConnectionString: string | undefined;
  /** Where it points, without any password (for messages). */
  where: string;
}

export function connect(connection: ConnectionOptions, s: Settings): Connection {
  const { timeoutMs, maxConnections: max, pooler } = s;
  if (typeof connection !== 'object' || connection === null) {
    throw new LeaseTypeError('connection must be { connectionString } or { pool }');
  }
  if ('pool' in connection) {
    const pool = connection.pool as unknown;
    if (typeof pool !== 'object' || pool === null || typeof (pool as Pool).connect !== 'function') {
      throw new LeaseTypeError('pool must be a node-postgres Pool');
    }
    const listen = s.listenConnectionString;
    return { pool: connection.pool, ownsPool: false, connectionString: undefined, listenConnectionString: listen, where: poolWhere(connection.pool) };
  }
  if (typeof (connection as { connectionString?: unknown }).connectionString === 'string') {
    const { connectionString } = connection;
    const pool = createPool(connectionString, timeoutMs, max, pooler);
    const listen = s.listenConnectionString ?? connectionString;
    return { pool, ownsPool: true, connectionString, listenConnectionString: listen, where: describeWhere(connectionString) };
  }
  throw new LeaseTypeError('connection must be { connectionString: string } or { pool }');
}

/** The dedicated LISTEN connection: a client of its own, or a checkout of the caller's pool. */
export async function listenConnection(connection: Connection, timeoutMs: number): Promise<pg.Client | pg.PoolClient> {
  if (connection.listenConnectionString === undefined) return connection.pool.connect();
  const client = newClient(connection.listenConnectionString, {
    application_name: 'sql_lease_mastra_listen',
    connectionTimeoutMillis: Math.ceil(timeoutMs),
    keepAlive: true,
  });
  client.on('error', () => undefined); // reported through the listener's own handler
  await client.connect();
  return client;
}
