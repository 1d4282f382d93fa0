/**
 * `@sql-lease/mastra`: Mastra's `LeaseProvider` on PostgreSQL, on the same leases table (and
 * with the same semantics) as the Python library sql_lease.
 */

import type { LeaseProvider } from '@mastra/core/events';

import { PostgresLeaseProvider } from './provider.js';

export {
  LeaseConnectionError,
  LeaseDatabaseError,
  LeaseError,
  LeaseRangeError,
  LeaseSchemaError,
  LeaseTimeoutError,
  LeaseTypeError,
} from './errors.js';
export {
  DEFAULT_TIMEOUT_MS,
  PostgresLeaseProvider,
  type AcquireResult,
  type ConnectionOptions,
  type Lease,
  type Tenure,
  type ProviderOptions,
} from './provider.js';
export { MAX_NAME_BYTES, MAX_TTL_MS } from './validate.js';
export { LeasingPubSub, withLeases } from './with-leases.js';

// Compile-time check: the provider is a Mastra LeaseProvider (the import is type-only, so the
// package does not load @mastra/core at run time).
const _isLeaseProvider: (p: PostgresLeaseProvider) => LeaseProvider = (p) => p;
void _isLeaseProvider;
