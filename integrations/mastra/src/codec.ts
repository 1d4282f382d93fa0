/**
 * Events as rows: the stored form of a published event (JSON of everything but the fields the
 * PubSub assigns) and the `Event` a row turns back into; plus the PubSub's small argument checks.
 */

import type { Event, EventCallback } from '@mastra/core/events';

import { LeaseRangeError, LeaseTypeError } from './errors.js';
import type { Row } from './execute.js';

/** What `publish` takes: an event without the fields the PubSub assigns. */
export type PublishedEvent = Omit<Event, 'id' | 'createdAt'>;

/** The stored form of an event: everything but `id`, `createdAt` and `deliveryAttempt`, as JSON. */
export function encode(event: PublishedEvent): string {
  if (typeof event !== 'object' || event === null || typeof event.type !== 'string') {
    throw new LeaseTypeError('event must be an object with a string type');
  }
  const { id: _id, createdAt: _createdAt, deliveryAttempt: _attempt, ...rest } = event as Partial<Event>;
  let text: string | undefined;
  try {
    text = JSON.stringify(rest);
  } catch (error) {
    throw new LeaseTypeError(`event is not JSON-serialisable: ${error instanceof Error ? error.message : String(error)}`);
  }
  if (text === undefined) throw new LeaseTypeError('event is not JSON-serialisable');
  return text;
}

/** An event from a row `[id, seq, payload, created_at (epoch ms), ...]`. */
export function decode(row: Row, deliveryAttempt: number): Event {
  const stored = JSON.parse(row[2] as string) as Omit<Event, 'id' | 'createdAt'>;
  return {
    ...stored,
    id: String(row[0]),
    createdAt: new Date(Number(row[3])), // epoch milliseconds (events-sql.ts)
    index: stored.index ?? Number(row[1]),
    deliveryAttempt,
  };
}

export function checkCallback(cb: unknown): asserts cb is EventCallback {
  if (typeof cb !== 'function') throw new LeaseTypeError('cb must be a function');
}

export function checkOffset(offset: unknown): void {
  if (typeof offset !== 'number' || !Number.isInteger(offset)) {
    throw new LeaseTypeError(`offset must be an integer, not ${String(offset)}`);
  }
  if (offset < 0) throw new LeaseRangeError(`offset must be 0 or more, not ${offset}`);
}

/** An error as one line for a log message. */
export function describe(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}
