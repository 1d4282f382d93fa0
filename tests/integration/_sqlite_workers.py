"""Worker processes for the SQLite start-up tests: many processes open one file at once.

Each worker is a long-lived process (spawned once per test module) that takes one job per round
from its own inbox, waits on the shared barrier, and runs it:

- ``("open", url, timeout)``: what an application's first moments do: build a provider with
  `from_url` and make a few calls on several connections at once;
- ``("stress", url, keys, seconds, timeout)``: every operation at random on a few hot keys,
  through two providers of the process (one of them closed and opened again now and then);
- ``("churn", url, keys, seconds, timeout)``: open a provider, make two calls, close it, over
  and over (when the file's last connection closes, SQLite checkpoints and removes the WAL).

The reader process reads the file with plain ``sqlite3`` meanwhile. Every outcome goes to the
results queue as ``(worker, outcome)``: "open" reports ``"ok"`` or ``"<error type>: <message>"``,
"stress" a dict of counts by outcome.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
from collections import Counter
from collections.abc import Awaitable
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier, Event
from typing import Any

from sql_lease import LeaseTimeoutError, SqlLeaseProvider

LONG = 60_000


def worker(index: int, inbox: Queue[Any], barrier: Barrier, results: Queue[Any]) -> None:
    """Per round: wait at the barrier, then run the round's job (see the module docstring)."""
    while (job := inbox.get()) is not None:
        barrier.wait()
        if job[0] in ("stress", "churn"):
            kind, url, keys, seconds, timeout = job
            run = _stress if kind == "stress" else _churn
            results.put((index, asyncio.run(run(url, index, keys, seconds, timeout))))
            continue
        _, url, timeout = job
        try:
            asyncio.run(_first_calls(url, index, timeout))
        except Exception as exc:
            results.put((index, f"{type(exc).__name__}: {exc}"))
        else:
            results.put((index, "ok"))


async def _first_calls(url: str, index: int, seconds: float) -> None:
    provider = SqlLeaseProvider.from_url(url, timeout=seconds)
    try:
        # Three connections open at the same instant in this process, as a busy app's do.
        key = f"start-{index}"
        await _all(
            provider.acquire_lease(key, "me", LONG),
            provider.get_lease_owner(f"other-{index}"),
            provider.acquire_lease("hot", f"w{index}", LONG),
        )
        assert await provider.get_lease_owner(key) == "me"
        assert await provider.renew_lease(key, "me", LONG)
        await provider.release_lease(key, "me")
    finally:
        await provider.aclose()


async def _all(*calls: Awaitable[object]) -> None:
    """Run ``calls`` at once; when some fail, raise the first failure after all are done."""
    for outcome in await asyncio.gather(*calls, return_exceptions=True):
        if isinstance(outcome, BaseException):
            raise outcome


def reader(inbox: Queue[Any], barrier: Barrier, done: Event, results: Queue[Any]) -> None:
    """Per round: wait at the barrier, then read the file until the round is over."""
    while (path := inbox.get()) is not None:
        barrier.wait()
        reads = 0
        try:
            conn = sqlite3.connect(path, timeout=10, isolation_level=None)
            try:
                while not done.is_set() or reads == 0:
                    conn.execute("SELECT count(*) FROM leases").fetchall()
                    reads += 1
            finally:
                conn.close()
        except Exception as exc:
            results.put((-1, f"{type(exc).__name__}: {exc}"))
        else:
            results.put((-1, "ok"))


async def _stress(
    url: str, worker: int, keys: list[str], seconds: float, call_timeout: float
) -> dict[str, int]:
    """Counts outcomes: "ok", "timeout" (`LeaseTimeoutError`), or the message of any other."""
    rng = random.Random(worker)
    counts: Counter[str] = Counter()
    steady = SqlLeaseProvider.from_url(url, timeout=call_timeout)
    second = SqlLeaseProvider.from_url(url, timeout=call_timeout)
    deadline = time.monotonic() + seconds
    mine = f"w{worker}"
    try:
        while time.monotonic() < deadline:
            if rng.random() < 0.02:  # a second from_url in this process, again
                await second.aclose()
                second = SqlLeaseProvider.from_url(url, timeout=call_timeout)
            provider = rng.choice([steady, second])
            key = rng.choice(keys)
            ttl = rng.choice([20, 100, 1_000])
            op = rng.randrange(11)
            try:
                if op == 0:
                    await provider.acquire_lease(key, mine, ttl)
                elif op == 1:
                    await provider.get_lease_owner(key)
                elif op == 2:
                    await provider.get_lease(key)
                elif op == 3:
                    await provider.release_lease(key, mine)
                elif op == 4:
                    await provider.renew_lease(key, mine, ttl)
                elif op == 5:
                    await provider.transfer_lease(key, mine, f"w{rng.randrange(8)}", ttl)
                elif op == 6:
                    await provider.renew_leases([(k, mine) for k in keys], ttl)
                elif op == 7:
                    await provider.force_release(key)
                elif op == 8:
                    await provider.list_leases(limit=10)
                elif op == 9:
                    await provider.purge_expired(min_age_ms=0, batch_size=10)
                else:  # several connections of one process at once
                    await _all(
                        provider.acquire_lease(key, mine, ttl),
                        provider.get_lease_owner(key),
                        provider.now(),
                    )
                counts["ok"] += 1
            except LeaseTimeoutError:
                counts["timeout"] += 1
            except Exception as exc:
                counts[f"{type(exc).__name__}: {exc}"] += 1
    finally:
        await second.aclose()
        await steady.aclose()
    return dict(counts)


async def _churn(
    url: str, worker: int, keys: list[str], seconds: float, call_timeout: float
) -> dict[str, int]:
    counts: Counter[str] = Counter()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        provider = SqlLeaseProvider.from_url(url, timeout=call_timeout)
        try:
            await provider.acquire_lease(keys[worker % len(keys)], f"w{worker}", 50)
            await provider.get_lease_owner(keys[0])
            counts["ok"] += 1
        except Exception as exc:
            counts[f"{type(exc).__name__}: {exc}"] += 1
        finally:
            await provider.aclose()
    return dict(counts)
