/**
 * `withLeases(pubsub, provider)`: any Mastra `PubSub`, with leases from `provider`.
 *
 * A PubSub that cannot lease makes Mastra's signals runtime fall back to its always-win no-op
 * provider, so every process thinks it owns every thread. The wrapper delegates event delivery
 * to the given PubSub unchanged and answers the five lease methods (so `isLeaseProvider()` is
 * true) and `getLeaseProvider()` (which the runtime asks first, e.g. through `CachingPubSub`)
 * with `provider`. It neither starts nor closes either of them.
 */

import { PubSub, isLeaseProvider } from '@mastra/core/events';
import type { Event, EventCallback, LeaseProvider, PubSubDeliveryMode, SubscribeOptions } from '@mastra/core/events';

import { LeaseTypeError } from './errors.js';

/** A Mastra PubSub whose leases come from a separate `LeaseProvider`. */
export class LeasingPubSub extends PubSub implements LeaseProvider {
  readonly #inner: PubSub;
  readonly #leases: LeaseProvider;

  constructor(inner: PubSub, leases: LeaseProvider) {
    super();
    const candidate = inner as unknown as Record<string, unknown> | null;
    if (
      typeof candidate !== 'object' ||
      candidate === null ||
      !['publish', 'subscribe', 'unsubscribe', 'flush'].every((m) => typeof candidate[m] === 'function')
    ) {
      throw new LeaseTypeError('pubsub must be a Mastra PubSub (publish, subscribe, unsubscribe, flush)');
    }
    if (!isLeaseProvider(leases)) {
      throw new LeaseTypeError(
        'provider must be a LeaseProvider (acquireLease, getLeaseOwner, releaseLease, renewLease, transferLease)',
      );
    }
    this.#inner = inner;
    this.#leases = leases;
  }

  // -- event delivery: the inner PubSub's, unchanged ------------------------------------

  publish(topic: string, event: Omit<Event, 'id' | 'createdAt'>, options?: { localOnly?: boolean }): Promise<void> {
    return this.#inner.publish(topic, event, options);
  }

  subscribe(topic: string, cb: EventCallback, options?: SubscribeOptions): Promise<void> {
    return this.#inner.subscribe(topic, cb, options);
  }

  unsubscribe(topic: string, cb: EventCallback): Promise<void> {
    return this.#inner.unsubscribe(topic, cb);
  }

  flush(): Promise<void> {
    return this.#inner.flush();
  }

  override clearTopic(topic: string): Promise<void> {
    return this.#inner.clearTopic(topic);
  }

  override get supportedModes(): ReadonlyArray<PubSubDeliveryMode> {
    return this.#inner.supportedModes;
  }

  override get supportsNativeBatching(): boolean {
    return this.#inner.supportsNativeBatching;
  }

  override get supportsOffsets(): boolean {
    return this.#inner.supportsOffsets;
  }

  override getHistory(topic: string, offset?: number): Promise<Event[]> {
    return this.#inner.getHistory(topic, offset);
  }

  override subscribeWithReplay(topic: string, cb: EventCallback): Promise<void> {
    return this.#inner.subscribeWithReplay(topic, cb);
  }

  override subscribeFromOffset(topic: string, offset: number, cb: EventCallback): Promise<void> {
    return this.#inner.subscribeFromOffset(topic, offset, cb);
  }

  /** The wrapped PubSub (for its own methods, such as closing it). */
  getInner(): PubSub {
    return this.#inner;
  }

  // -- leasing: the provider's -----------------------------------------------------------

  /** What Mastra's runtime asks first when it resolves the lease provider of a PubSub. */
  getLeaseProvider(): LeaseProvider {
    return this.#leases;
  }

  acquireLease(key: string, owner: string, ttlMs: number): Promise<{ acquired: boolean; owner?: string }> {
    return this.#leases.acquireLease(key, owner, ttlMs);
  }

  getLeaseOwner(key: string): Promise<string | undefined> {
    return this.#leases.getLeaseOwner(key);
  }

  releaseLease(key: string, owner: string): Promise<void> {
    return this.#leases.releaseLease(key, owner);
  }

  renewLease(key: string, owner: string, ttlMs: number): Promise<boolean> {
    return this.#leases.renewLease(key, owner, ttlMs);
  }

  transferLease(key: string, fromOwner: string, toOwner: string, ttlMs: number): Promise<boolean> {
    return this.#leases.transferLease(key, fromOwner, toOwner, ttlMs);
  }
}

/** `pubsub` for event delivery, `provider` for leases: pass the result as Mastra's `pubsub`. */
export function withLeases(pubsub: PubSub, provider: LeaseProvider): LeasingPubSub {
  return new LeasingPubSub(pubsub, provider);
}
