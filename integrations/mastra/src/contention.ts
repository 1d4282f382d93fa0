/**
 * Which keys are contended right now, so that acquire can look before it writes (as the Python
 * provider's `sql_lease._core.contention`).
 *
 * An acquire of a key another owner holds is bound to fail, and its full statement (an insert
 * or update gated on the snapshot) costs the server about twice a plain read even when it
 * changes nothing. So after an acquire has seen a key held by someone else, acquires of that
 * key in this process for the next `HINT_MS` first run the `holder` read: a live other holder
 * is the answer, with no write attempted. Only when the key looks free or the caller's own do
 * they run the full statement, which re-checks everything under the row lock as always.
 *
 * Both answers are linearizable: a failed acquire takes effect at the read's snapshot, when
 * that holder was live. The hint only picks which statement goes first, so a stale or missing
 * hint costs a round trip at most, never correctness. Uncontended keys never get a hint.
 */

/** How long after a key was last seen held by another owner acquires still read first (ms). */
export const HINT_MS = 1_000;
/** Keys remembered at most; the oldest hint goes first. */
export const MAX_HINTS = 4_096;

/** Keys recently seen held by another owner (bounded; entries go stale on their own). */
export class ContentionHints {
  readonly #until = new Map<string, number>();

  get size(): number {
    return this.#until.size;
  }

  /** True when an acquire of `key` should read the holder before writing. */
  contended(key: string): boolean {
    if (this.#until.size === 0) return false;
    const until = this.#until.get(key);
    if (until === undefined) return false;
    if (until < performance.now()) {
      this.#until.delete(key);
      return false;
    }
    return true;
  }

  /** An acquire of `key` just saw it held by another owner. */
  held(key: string): void {
    const hints = this.#until;
    hints.delete(key);
    hints.set(key, performance.now() + HINT_MS);
    if (hints.size > MAX_HINTS) hints.delete(hints.keys().next().value as string);
  }

  /** An acquire of `key` saw it free or held by its caller. */
  free(key: string): void {
    if (this.#until.size !== 0) this.#until.delete(key);
  }
}
