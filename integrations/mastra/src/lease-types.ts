/**
 * What the lease provider's calls take and answer (no I/O): Mastra's `{ acquired, owner }`
 * and this package's extensions (fences, database times, counting leases, metadata,
 * all-or-none acquires). `provider.ts` re-exports them.
 */

import type { Metadata } from './counting-values.js';

/** What `acquireLease` returns: exactly Mastra's `{ acquired, owner }`. */
export interface AcquireResult {
  acquired: boolean;
  /** The caller when acquired, else the live holder (of a counting lease: the one whose grant ends first). */
  owner: string;
}

/** What `acquireFencedLease` returns: `acquireLease`'s answer plus the tenure's fence and expiry. */
export interface FencedAcquireResult extends AcquireResult {
  /** The fencing token of the tenure (the caller's, or the holder's). */
  fence: bigint;
  /** When that tenure expires, by the database clock (millisecond precision). */
  expiresAt: Date;
}

/** An acquire's answer with its expiry as read (a Date, or a `ForeignTime`: result-types.ts). */
export type RawAcquire = Omit<FencedAcquireResult, 'expiresAt'> & { expiresAt: unknown };

/**
 * The optional fourth argument of `acquireLease` (an extension: Mastra calls it with three).
 * Without it, or with `limit: 1` and no metadata, the call is exactly the plain lease.
 */
export interface AcquireOptions {
  /**
   * A counting lease: at most `limit` live owners of the key at once (1 to 1000; default 1).
   * Every holder of a key must use the same limit (else `LeaseLimitMismatchError`).
   */
  limit?: number | undefined;
  /**
   * A value stored with the caller's grant (a string, returned as a string, or bytes, returned
   * as a Buffer; at most 1024 bytes), replaced when given again, kept otherwise.
   */
  metadata?: Metadata | null | undefined;
}

/** The optional fifth argument of `transferLease`: the new owner's metadata (else the old one's is kept). */
export interface TransferOptions {
  metadata?: Metadata | null | undefined;
}

/** A tenure as a renew or transfer reports it: its fence and its new expiry. */
export interface Tenure {
  fence: bigint;
  expiresAt: Date;
}

/** A live lease (or one holder of a counting lease) as `getLease` and `getLeaseHolders` read it. */
export interface Lease {
  key: string;
  owner: string;
  fence: bigint;
  expiresAt: Date;
  acquiredAt: Date;
  /** The metadata stored with the lease (absent when it has none). */
  metadata?: Buffer | string;
}

/** What `acquireLeases` returns: every key or none. */
export interface AcquireAllResult {
  /** True when the owner now holds every key (as plain leases). */
  acquired: boolean;
  /** When acquired: each key (as the caller wrote it) with its tenure; else empty. */
  leases: Map<string, Tenure>;
  /** When refused: the first key (in sorted order of stored bytes) held by someone else. */
  blockedKey?: string;
  /** Its holder. */
  blockedBy?: string;
}
