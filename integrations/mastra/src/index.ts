/**
 * `@sql-lease/mastra`: Mastra on PostgreSQL alone. `PostgresPubSub` carries Mastra's events in
 * tables of sql_lease's migrations and is its `LeaseProvider`; `PostgresLeaseProvider` is the
 * lease provider on its own, on the same leases table (and with the same semantics) as the
 * Python library sql_lease; `withLeases` gives any other PubSub these leases.
 */

import type { LeaseProvider } from '@mastra/core/events';

import { PostgresLeaseProvider } from './provider.js';

export {
  LeaseConnectionError,
  LeaseDatabaseError,
  LeaseError,
  LeaseLimitMismatchError,
  LeaseRangeError,
  LeaseSchemaError,
  LeaseTimeoutError,
  LeaseTypeError,
} from './errors.js';
export {
  DEFAULT_TIMEOUT_MS,
  PostgresLeaseProvider,
  type AcquireAllResult,
  type AcquireOptions,
  type AcquireResult,
  type ConnectionOptions,
  type FencedAcquireResult,
  type LeaseLogger,
  type Lease,
  type Tenure,
  type TransferOptions,
  type ProviderOptions,
} from './provider.js';
export { MAX_KEYS, MAX_LIMIT, MAX_METADATA_BYTES, type Metadata } from './counting-values.js';
export { type Pooler } from './pooler.js';
export { EVENTS_REVISION, EXPECTED_COLUMNS, eventNames, type EventNames } from './events-sql.js';
export { DEFAULT_RETENTION_MS, PostgresPubSub, type PubSubLogger, type PubSubLoggerOption, type PubSubOptions } from './pubsub.js';
export { ThreadLeases, threadTopic } from './thread-leases.js';
export { MAX_NAME_BYTES, MAX_TTL_MS } from './validate.js';
export { LONG_KEY_HEAD_BYTES, LONG_KEY_MARKER, mapLongKey } from './keys.js';
export { LeasingPubSub, withLeases } from './with-leases.js';

// Compile-time check: the provider is a Mastra LeaseProvider.
const _isLeaseProvider: (p: PostgresLeaseProvider) => LeaseProvider = (p) => p;
void _isLeaseProvider;
