/**
 * One dedicated connection that LISTENs on the event channel and reports each notification's
 * topic. When the connection breaks it reconnects with a capped backoff and then reports
 * `onResume()`, since notifications sent while it was down are lost: the PubSub re-reads every
 * subscribed topic then.
 */

import type { Client, Notification, PoolClient } from 'pg';

export interface ListenerOptions {
  /** A fresh connection (a new `pg.Client`, or a checkout from the caller's pool). */
  connect: () => Promise<Client | PoolClient>;
  channel: string;
  onTopic: (topic: string) => void;
  onResume: () => void;
  onError: (error: unknown) => void;
}

const MIN_BACKOFF_MS = 100;
const MAX_BACKOFF_MS = 5_000;

export class Listener {
  readonly #options: ListenerOptions;
  #client: Client | PoolClient | undefined;
  #closed = false;
  #backoff = MIN_BACKOFF_MS;
  #timer: NodeJS.Timeout | undefined;

  constructor(options: ListenerOptions) {
    this.#options = options;
  }

  /** Connect and LISTEN; throws when the first connection fails. */
  async start(): Promise<void> {
    await this.#open();
  }

  get connected(): boolean {
    return this.#client !== undefined;
  }

  async #open(): Promise<void> {
    const client = await this.#options.connect();
    const onNotification = (message: Notification): void => {
      if (message.channel === this.#options.channel && message.payload !== undefined) {
        this.#options.onTopic(message.payload);
      }
    };
    const onBroken = (error?: unknown): void => {
      if (this.#client !== client) return;
      this.#client = undefined;
      client.removeListener('notification', onNotification);
      if (error !== undefined) this.#options.onError(error);
      dispose(client, error ?? new Error('the listening connection ended'));
      this.#schedule();
    };
    client.on('notification', onNotification);
    client.on('error', onBroken);
    client.on('end', () => onBroken());
    try {
      await client.query(`LISTEN "${this.#options.channel.replaceAll('"', '""')}"`);
    } catch (error) {
      client.removeListener('notification', onNotification);
      dispose(client, error);
      throw error;
    }
    if (this.#closed) {
      dispose(client);
      return;
    }
    this.#client = client;
    this.#backoff = MIN_BACKOFF_MS;
  }

  #schedule(): void {
    if (this.#closed || this.#timer !== undefined) return;
    const delay = this.#backoff;
    this.#backoff = Math.min(MAX_BACKOFF_MS, this.#backoff * 2);
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#open().then(
        () => {
          if (!this.#closed) this.#options.onResume();
        },
        (error: unknown) => {
          this.#options.onError(error);
          this.#schedule();
        },
      );
    }, delay);
    this.#timer.unref();
  }

  /** Stop listening and give the connection back (or end it). Idempotent. */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    const client = this.#client;
    this.#client = undefined;
    if (client === undefined) return;
    try {
      await client.query('UNLISTEN *');
    } catch {
      dispose(client, new Error('unlisten failed'));
      return;
    }
    dispose(client);
  }
}

/** A pool checkout goes back to its pool (destroyed after an error); a client is ended. */
function dispose(client: Client | PoolClient, error?: unknown): void {
  const release = (client as Partial<PoolClient>).release;
  if (typeof release === 'function') {
    try {
      release.call(client, error === undefined ? undefined : error instanceof Error ? error : new Error(String(error)));
    } catch {
      // already released
    }
  } else {
    (client as Client).end().catch(() => undefined);
  }
}
