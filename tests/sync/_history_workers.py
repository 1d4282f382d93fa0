"""Threads that run random sync-provider operations and record every call for the history checker.

The sync counterpart of tests/reliability/_workers.py: the same operation mix, TTLs and owners,
the same `Call` records and clock calibration, but each client is a thread calling a blocking
`sql_lease.sync.SqlLeaseProvider` shared by the threads of its process.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from sql_lease import LeaseError
from sql_lease.sync import SqlLeaseProvider
from tests.reliability._history import us
from tests.reliability._workers import MIX, OWNERS, TTLS, Calibration, Call, Plan, now_us

#: SQLite's clock (``strftime('%f', 'now')``) has whole milliseconds, truncated: at any instant
#: it reads up to this many microseconds behind a microsecond clock.
SQLITE_TICK_US = 1_000


def calibrate(provider: SqlLeaseProvider, step_us: int = 0, samples: int = 12) -> Calibration:
    """Bound the database clock's offset from ours (see tests/reliability/_workers.calibrate);
    ``step_us``: the database clock's resolution (it truncates to whole steps)."""
    cal: Calibration | None = None
    for _ in range(samples):
        before = now_us()
        db = us(provider.now())
        after = now_us()
        one = Calibration(db - after - 2, db - before + 2)
        cal = one if cal is None else cal.join(one)
    assert cal is not None
    return Calibration(cal.lo - step_us, cal.hi + step_us)


def call_once(
    provider: SqlLeaseProvider, kind: str, key: str, owner: str, to: str, ttl: int
) -> Any:
    """Run one operation and return its result in the checker's encoding."""
    if kind == "acquire":
        res = provider.acquire_lease(key, owner, ttl)
        assert res.expires_at is not None and res.owner is not None
        return (res.acquired, res.owner, res.fence, us(res.expires_at))
    if kind == "get_owner":
        return provider.get_lease_owner(key)
    if kind == "get_lease":
        lease = provider.get_lease(key)
        if lease is None:
            return None
        assert lease.key == key and lease.acquired_at <= lease.expires_at
        return (lease.owner, lease.fence, us(lease.expires_at))
    if kind == "renew":
        done = provider.renew(key, owner, ttl)
    elif kind == "transfer":
        done = provider.transfer(key, owner, to, ttl)
    else:
        done = provider.release(key, owner)
    return None if done is None else (done[0], us(done[1]))


def attempt(
    provider: SqlLeaseProvider,
    client: str,
    kind: str,
    key: str,
    owner: str,
    to: str | None = None,
    ttl: int | None = None,
) -> Call:
    """Make one call and record it, whatever happens (a non-`LeaseError` propagates)."""
    inv = now_us()
    try:
        result = call_once(provider, kind, key, owner, to or owner, ttl or 1)
    except LeaseError as exc:
        ret = now_us()
        unknown = bool(getattr(exc, "outcome_unknown", False))
        state = getattr(exc.__cause__, "sqlstate", None)
        return Call(
            client, key, kind, owner, inv, ret, None, to, ttl, type(exc).__name__, unknown, state
        )
    return Call(client, key, kind, owner, inv, now_us(), result, to, ttl)


def run_client(
    provider: SqlLeaseProvider, client: str, plan: Plan, rng: random.Random, out: list[Call]
) -> None:
    kinds = [k for k, _ in MIX]
    weights = [w for _, w in MIX]
    mine: dict[str, str] = {}  # key -> owner this client last acquired it as
    for _ in range(plan.ops or 0):
        key = rng.choice(plan.keys)
        kind = rng.choices(kinds, weights)[0]
        owner = mine.get(key) if rng.random() < 0.7 else None
        owner = owner or rng.choice(OWNERS)
        to = rng.choice(OWNERS) if kind == "transfer" else None
        ttl = rng.choice(TTLS) if kind in ("acquire", "renew", "transfer") else None
        call = attempt(provider, client, kind, key, owner, to, ttl)
        out.append(call)  # list.append is atomic: the threads share ``out``
        if call.error is not None:
            time.sleep(plan.error_pause)
            continue
        if kind == "acquire" and call.result[0]:
            mine[key] = owner
        elif kind == "transfer" and call.result is not None:
            assert to is not None
            mine[key] = to
        if rng.random() < plan.pause:
            time.sleep(rng.choice((0.001, 0.01, 0.03)))


def process_worker(
    url: str, name: str, plan: Plan, seed: int, threads: int, start_at: float
) -> dict[str, Any]:
    """Entry point of a worker process: calibrate, run ``threads`` clients, calibrate again."""
    step = SQLITE_TICK_US if url.startswith("sqlite") else 0
    with SqlLeaseProvider.from_url(url, timeout=10, pool_size=threads) as provider:
        cal = calibrate(provider, step)
        time.sleep(max(0.0, start_at - time.time()))
        calls: list[Call] = []
        failures: list[BaseException] = []

        def client(t: int) -> None:
            try:
                run_client(provider, f"{name}t{t}", plan, random.Random(seed * 100 + t), calls)
            except BaseException as exc:  # a client that died would leave a hole in the history
                failures.append(exc)

        pool = [threading.Thread(target=client, args=(t,)) for t in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        if failures:
            raise failures[0]
        cal = cal.join(calibrate(provider, step))
        return {"calls": calls, "cal": cal}
