"""Clients that run random lease operations and record every call for the history checker.

Each call is recorded with its invocation and completion on the client's clock, its arguments,
and what it returned, including the database times the provider reports. `calibrate` measures
the client clock against the database clock so the checker can place every call in database
time. Runs inside the test process (`run_clients`) or in worker processes (`process_worker`).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, replace
from typing import Any

from sql_lease import LeaseError, SqlLeaseProvider

from ._history import Op, us

#: (kind, weight) of the random operations.
MIX = (
    ("acquire", 30),
    ("get_owner", 12),
    ("get_lease", 8),
    ("renew", 18),
    ("transfer", 14),
    ("release", 18),
)
#: The same on a counting key (``limit=N``): ``holders`` is ``get_lease_holders``.
COUNT_MIX = (
    ("acquire", 34),
    ("holders", 14),
    ("renew", 18),
    ("transfer", 12),
    ("release", 22),
)
#: TTLs in ms: short ones expire mid-run, so expiry is judged by the database clock constantly.
TTLS = (8, 25, 60, 150, 400, 3_000)
#: Owners shared by every client: two clients acting for one owner is part of the contract.
OWNERS = ("a", "b", "c\0d", "é\u2603")
#: Owners of counting keys: more than the limits, so that slots run out.
COUNT_OWNERS = (*OWNERS, "e")


def now_us() -> int:
    return time.time_ns() // 1000


@dataclass(frozen=True)
class Call:
    """One call as a client saw it (client clock, microseconds)."""

    client: str
    key: str
    kind: str
    owner: str
    inv: int
    ret: int
    result: Any = None
    to_owner: str | None = None
    ttl_ms: int | None = None
    error: str | None = None
    unknown: bool = False
    sqlstate: str | None = None  # of the driver error behind ``error``, if the server sent one

    @property
    def seconds(self) -> float:
        return (self.ret - self.inv) / 1e6


@dataclass(frozen=True)
class Calibration:
    """Database clock minus client clock lies in [lo, hi] microseconds."""

    lo: int
    hi: int

    def join(self, other: Calibration) -> Calibration:
        lo, hi = max(self.lo, other.lo), min(self.hi, other.hi)
        if lo > hi:  # the clocks moved apart (should not happen on one host): stay sound
            return Calibration(min(self.lo, other.lo), max(self.hi, other.hi))
        return Calibration(lo, hi)


async def calibrate(provider: SqlLeaseProvider, samples: int = 12) -> Calibration:
    """Bound the database clock's offset from ours with a few ``clock_timestamp()`` round trips."""
    cal: Calibration | None = None
    for _ in range(samples):
        before = now_us()
        db = us(await provider.now())
        after = now_us()
        # The database read its clock between our two readings; allow for rounding to µs.
        one = Calibration(db - after - 2, db - before + 2)
        cal = one if cal is None else cal.join(one)
    assert cal is not None
    return cal


def to_ops(calls: list[Call], cal: Calibration, first_id: int = 0) -> list[Op]:
    """Place calls in database time for the checker."""
    ops = []
    for i, c in enumerate(calls):
        completed = c.error is None or not c.unknown
        ops.append(
            Op(
                id=first_id + i,
                client=c.client,
                key=c.key,
                kind=c.kind,
                owner=c.owner,
                lo=c.inv + cal.lo,
                hi=c.ret + cal.hi if completed else None,
                result=c.result,
                to_owner=c.to_owner,
                ttl_ms=c.ttl_ms,
                unknown=c.unknown,
                error=c.error,
            )
        )
    return ops


async def call_once(
    provider: SqlLeaseProvider,
    kind: str,
    key: str,
    owner: str,
    to: str,
    ttl: int,
    limit: int | None = None,
):
    """Run one operation and return its result in the checker's encoding (``limit``: the
    calls of a counting key, `count_once`)."""
    if limit is not None:
        return await count_once(provider, kind, key, owner, to, ttl, limit)
    if kind == "acquire":
        res = await provider.acquire_lease(key, owner, ttl)
        assert res.expires_at is not None and res.owner is not None
        return (res.acquired, res.owner, res.fence, us(res.expires_at))
    if kind == "get_owner":
        return await provider.get_lease_owner(key)
    if kind == "get_lease":
        lease = await provider.get_lease(key)
        if lease is None:
            return None
        assert lease.key == key and lease.acquired_at <= lease.expires_at
        return (lease.owner, lease.fence, us(lease.expires_at))
    if kind == "renew":
        done = await provider.renew(key, owner, ttl)
    elif kind == "transfer":
        done = await provider.transfer(key, owner, to, ttl)
    else:
        done = await provider.release(key, owner)
    return None if done is None else (done[0], us(done[1]))


async def count_once(
    provider: SqlLeaseProvider, kind: str, key: str, owner: str, to: str, ttl: int, limit: int
):
    """One call on a counting key of ``limit`` slots, in `_counting_model`'s encoding: a
    transfer through ``transfer_lease`` (a bool: the reporting ``transfer`` is plain only)."""
    if kind == "acquire":
        res = await provider.acquire_lease(key, owner, ttl, limit=limit)
        assert res.expires_at is not None and res.owner is not None
        return (res.acquired, res.owner, res.fence, us(res.expires_at))
    if kind == "holders":
        leases = await provider.get_lease_holders(key)
        assert [h.fence for h in leases] == sorted(h.fence for h in leases)  # oldest first
        assert all(h.key == key and h.acquired_at <= h.expires_at for h in leases)
        return tuple((h.owner, h.fence, us(h.expires_at)) for h in leases)
    if kind == "transfer":
        return await provider.transfer_lease(key, owner, to, ttl)
    done = await (
        provider.renew(key, owner, ttl) if kind == "renew" else provider.release(key, owner)
    )
    return None if done is None else (done[0], us(done[1]))


@dataclass
class Plan:
    """What a client does: which keys, how many ops or until when, how to pace itself."""

    keys: tuple[str, ...]
    ops: int | None = None  # per client task
    until: float | None = None  # deadline, time.time() (shared by processes)
    pause: float = 0.08  # chance of a short sleep between calls (lets short leases expire)
    error_pause: float = 0.02  # seconds to wait after a failed call
    #: The provider's coalescing mode: True (the default), False, or "always" (every call
    #: through the multi-row statements).
    coalesce: bool | str = True
    #: Counting keys and their limits: ``COUNT_MIX`` of counting calls on those keys.
    limits: tuple[tuple[str, int], ...] = ()


async def attempt(
    provider: SqlLeaseProvider,
    client: str,
    kind: str,
    key: str,
    owner: str,
    to: str | None = None,
    ttl: int | None = None,
    limit: int | None = None,
) -> Call:
    """Make one call and record it, whatever happens (a non-`LeaseError` propagates)."""
    inv = now_us()
    try:
        result = await call_once(provider, kind, key, owner, to or owner, ttl or 1, limit)
    except LeaseError as exc:
        ret = now_us()
        unknown = bool(getattr(exc, "outcome_unknown", False))
        state = getattr(exc.__cause__, "sqlstate", None)
        return Call(
            client, key, kind, owner, inv, ret, None, to, ttl, type(exc).__name__, unknown, state
        )
    return Call(client, key, kind, owner, inv, now_us(), result, to, ttl)


async def run_client(
    provider: SqlLeaseProvider, client: str, plan: Plan, rng: random.Random, out: list[Call]
) -> None:
    limits = dict(plan.limits)
    mixes = {
        m: ([k for k, _ in mix], [w for _, w in mix]) for m, mix in (("p", MIX), ("c", COUNT_MIX))
    }
    mine: dict[str, str] = {}  # key -> owner this client last acquired it as
    done = 0
    while True:
        if plan.ops is not None and done >= plan.ops:
            return
        if plan.until is not None and time.time() >= plan.until:
            return
        done += 1
        key = rng.choice(plan.keys)
        limit = limits.get(key)
        kinds, weights = mixes["p" if limit is None else "c"]
        owners = OWNERS if limit is None else COUNT_OWNERS
        kind = rng.choices(kinds, weights)[0]
        owner = mine.get(key) if rng.random() < 0.7 else None
        owner = owner or rng.choice(owners)
        to = rng.choice(owners) if kind == "transfer" else None
        ttl = rng.choice(TTLS) if kind in ("acquire", "renew", "transfer") else None
        call = await attempt(provider, client, kind, key, owner, to, ttl, limit)
        out.append(call)
        if call.error is not None:
            await asyncio.sleep(plan.error_pause)
            continue
        if kind == "acquire" and call.result[0]:
            mine[key] = owner
        elif kind == "transfer" and call.result:
            assert to is not None
            mine[key] = to
        if rng.random() < plan.pause:
            await asyncio.sleep(rng.choice((0.001, 0.01, 0.03)))


async def run_clients(
    provider: SqlLeaseProvider, name: str, plan: Plan, seed: int, tasks: int
) -> list[Call]:
    """Run ``tasks`` concurrent clients on one provider; all their calls, in no order."""
    out: list[Call] = []
    await asyncio.gather(
        *(
            run_client(provider, f"{name}t{t}", plan, random.Random(seed * 100 + t), out)
            for t in range(tasks)
        )
    )
    return out


def process_worker(
    url: str,
    name: str,
    plan: Plan,
    seed: int,
    tasks: int,
    timeout: float,
    start_at: float = 0.0,
    gate: Any = None,
) -> dict[str, Any]:
    """Entry point of a worker process: calibrate, run the clients, calibrate again.

    The clients start at ``start_at`` (wall clock) or, with a ``gate`` (a managed queue and
    event), once the worker has reported ready and the parent opened the gate. A deadline in
    ``plan.until`` is then relative: seconds after the start.
    """
    return asyncio.run(_process_worker(url, name, plan, seed, tasks, timeout, start_at, gate))


# The call timeout is the provider's setting, not a deadline for this coroutine.


async def _process_worker(
    url: str,
    name: str,
    plan: Plan,
    seed: int,
    tasks: int,
    timeout: float,  # noqa: ASYNC109
    start_at: float,
    gate: Any,
) -> dict[str, Any]:
    async with SqlLeaseProvider.from_url(
        url,
        timeout=timeout,
        pool_size=tasks,
        coalesce=plan.coalesce,  # type: ignore[arg-type]  # validated by the provider
    ) as provider:
        cal = await calibrate(provider)
        if gate is not None:
            ready, go = gate
            ready.put(name)
            await asyncio.to_thread(go.wait, 60)
            if plan.until is not None:
                plan = replace(plan, until=time.time() + plan.until)
        else:
            await asyncio.sleep(max(0.0, start_at - time.time()))
        started = time.monotonic()
        calls = await run_clients(provider, name, plan, seed, tasks)
        elapsed = time.monotonic() - started
        cal = cal.join(await calibrate(provider))
        batches = provider.coalescing_stats().values()
        coalesced = (sum(b for b, _ in batches), sum(n for _, n in batches))
        return {"calls": calls, "cal": cal, "elapsed": elapsed, "coalesced": coalesced}
