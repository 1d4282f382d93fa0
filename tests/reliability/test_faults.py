"""Faults injected while clients race: each run must stay linearizable, bounded and self-healing.

For every kind of fault the same invariants are checked on the recorded history:

- the history is linearizable (`_history`): in particular never two live owners, no fence going
  back, no lost or phantom write; a call that failed with ``outcome_unknown=False`` must not
  have taken effect, one with ``outcome_unknown=True`` may have, at any later time;
- every call ends within its configured timeout plus a small slack, with a result or a
  `LeaseError` (anything else escapes the client and fails the test);
- once the fault is over the provider recovers by itself: calls made a moment later succeed.

Each test prints what it injected and which errors came back (type, outcome_unknown, SQLSTATE).
``SQL_LEASE_FAULT_ROUNDS`` (default 1) runs every fault test that many times, each on a fresh
database: ``SQL_LEASE_FAULT_ROUNDS=20 scripts/test tests/reliability/test_faults.py -s``.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import time
import uuid
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from sql_lease import SqlLeaseProvider

from .._pg import terminate_backends
from ._cluster import Cluster
from ._history import check_history
from ._proxy import StallingProxy
from ._workers import (
    Calibration,
    Call,
    Plan,
    attempt,
    calibrate,
    process_worker,
    run_clients,
    to_ops,
)

#: What a loaded two-core machine may add to a call's configured timeout.
SLACK = 0.6
ROUNDS = int(os.environ.get("SQL_LEASE_FAULT_ROUNDS", "1"))


@pytest.fixture(autouse=True, params=range(1, ROUNDS + 1), ids=lambda n: f"round{n}")
def fault_round(request: pytest.FixtureRequest) -> int:
    """Repeats every test of this module ``SQL_LEASE_FAULT_ROUNDS`` times (a soak knob)."""
    return int(request.param)


def error_kinds(calls: list[Call]) -> Counter[str]:
    return Counter(
        f"{c.error}(outcome_unknown={c.unknown}, sqlstate={c.sqlstate})"
        for c in calls
        if c.error is not None
    )


def verify(
    kind: str,
    calls: list[tuple[list[Call], Calibration]],
    *,
    timeout: float,
    healed_at: float,
    injected: int,
) -> Counter[str]:
    """Check the three invariants; print and return the error tally."""
    flat = [c for group, _ in calls for c in group]
    ops = []
    for group, cal in calls:
        ops += to_ops(group, cal, first_id=len(ops))
    verdict = check_history(ops)
    assert verdict.ok, f"{kind}: {verdict.report()}"
    slow = sorted((c for c in flat if c.seconds > timeout + SLACK), key=lambda c: -c.seconds)
    assert not slow, f"{kind}: calls over {timeout}s + {SLACK}s: {slow[:5]}"
    healed_us = int(healed_at * 1e6)
    after = [c for c in flat if c.inv >= healed_us]
    assert len(after) >= 10, f"{kind}: too few calls after the fault to show recovery"
    # Recovery is an event, not a time window: once the fault has ended, every client gets a
    # call through (a busy machine may take a while to notice a dead connection), and from
    # its first success on no call of that client fails again.
    by_client: dict[str, list[Call]] = {}
    for c in sorted(after, key=lambda c: c.inv):
        by_client.setdefault(c.client, []).append(c)
    never = sorted(name for name, cs in by_client.items() if all(c.error for c in cs))
    assert not never, f"{kind}: clients that never recovered after the fault: {never[:5]}"
    relapsed = [
        c
        for cs in by_client.values()
        for c in cs[next(i for i, c in enumerate(cs) if c.error is None) :]
        if c.error is not None
    ]
    assert not relapsed, f"{kind}: failing again after recovering: {relapsed[:5]}"
    errors = error_kinds(flat)
    print(
        f"\n{kind}: {injected} injected, {len(flat)} calls ({len(flat) - errors.total()} ok), "
        f"max call {max(c.seconds for c in flat):.3f}s, errors: {dict(errors)}"
    )
    return errors


def run_processes(
    url: str,
    keys: tuple[str, ...],
    *,
    workers: int,
    seconds: float,
    timeout: float,
    inject: Any,
    coalesce: bool | str = True,
    tasks: int = 2,
) -> tuple[list[tuple[list[Call], Calibration]], Any]:
    """Run racing worker processes for ``seconds`` while ``inject(start)`` runs here.

    The workers connect and calibrate first; the clock starts once all of them are ready, so
    faults only hit the run itself.
    """
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ProcessPoolExecutor(workers, mp_context=ctx) as ex:
        ready, go = manager.Queue(), manager.Event()
        plan = Plan(keys=keys, until=seconds, coalesce=coalesce)
        futures = [
            ex.submit(
                process_worker, url, f"p{w}", plan, 7000 + w, tasks, timeout, 0.0, (ready, go)
            )
            for w in range(workers)
        ]
        for _ in range(workers):
            ready.get(timeout=90)
        start = time.time()
        go.set()
        injected = inject(start)
        results = [f.result(timeout=120) for f in futures]
    return [(r["calls"], r["cal"]) for r in results], injected


def sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.time()))


# -- backends killed mid-operation ------------------------------------------------------------


@pytest.mark.parametrize("coalesce", [True, "always"], ids=["coalesce", "batches"])
def test_backends_terminated_mid_operation(fresh_database: str, coalesce: bool | str) -> None:
    """Connections killed under calls, single ones and multi-row batches ("always", with
    more clients per process so that batches carry several calls)."""
    rng = random.Random(11)
    healed = {"at": 0.0}

    def inject(start_at: float) -> int:
        killed = 0
        sleep_until(start_at + 0.3)
        while time.time() < start_at + 2.5:
            killed += terminate_backends(fresh_database)
            time.sleep(rng.uniform(0.03, 0.2))
        healed["at"] = time.time() + 0.5
        return killed

    calls, killed = run_processes(
        fresh_database,
        ("kill\0a", "kill\0b", "kill\0c"),
        workers=3,
        seconds=4.0,
        timeout=2.0,
        inject=inject,
        coalesce=coalesce,
        tasks=2 if coalesce is True else 4,
    )
    assert killed >= 20, killed
    errors = verify(
        "pg_terminate_backend", calls, timeout=2.0, healed_at=healed["at"], injected=killed
    )
    assert errors, "terminating backends mid-run never hit a call"


# -- the server crashes and restarts under load ----------------------------------------------


def test_postgres_restarted_under_load(cluster: Cluster, cluster_database: str) -> None:
    healed = {"at": 0.0}

    def inject(start_at: float) -> int:
        for at in (1.0, 2.6):
            sleep_until(start_at + at)
            cluster.stop("immediate")  # a crash: no checkpoint, connections cut
            time.sleep(0.6)
            cluster.start()
        healed["at"] = time.time() + 1.0
        return 2

    calls, restarts = run_processes(
        cluster_database,
        ("crash\0a", "crash\0b"),
        workers=2,
        seconds=5.5,
        timeout=2.0,
        inject=inject,
    )
    errors = verify("restart", calls, timeout=2.0, healed_at=healed["at"], injected=restarts)
    assert any("LeaseConnectionError" in e for e in errors), errors


# -- the network stalls between client and server ---------------------------------------------


async def test_network_stall_between_client_and_server(database_url: str) -> None:
    u = make_url(database_url)
    proxy = StallingProxy(u.host or "127.0.0.1", u.port or 5432)
    await proxy.start()
    timeout = 0.6
    stalled = SqlLeaseProvider.from_url(
        u.set(host="127.0.0.1", port=proxy.port), timeout=timeout, connect_timeout=0.5, pool_size=3
    )
    direct = SqlLeaseProvider.from_url(database_url, timeout=5, pool_size=2)
    run = uuid.uuid4().hex[:8]  # the session database outlives this test: fresh keys
    keys = (f"stall\0a\0{run}", f"stall\0b\0{run}")
    try:
        cal = await calibrate(direct)
        start = time.time()
        plan = Plan(keys=keys, until=start + 5.5)

        async def inject() -> float:
            for at, length in ((0.8, 1.5), (3.0, 0.8)):
                await asyncio.sleep(max(0.0, start + at - time.time()))
                proxy.stall()
                await asyncio.sleep(length)
                proxy.resume()
            return time.time() + 1.0

        through, beside, healed_at = await asyncio.gather(
            run_clients(stalled, "via", plan, 31, tasks=3),
            run_clients(direct, "dir", plan, 32, tasks=1),
            inject(),
        )
        cal = cal.join(await calibrate(direct))
    finally:
        await stalled.aclose()
        await direct.aclose()
        await proxy.close()
    errors = verify(
        "network stall",
        [(through, cal), (beside, cal)],
        timeout=timeout,
        healed_at=healed_at,
        injected=proxy.stalls,
    )
    assert any("LeaseTimeoutError" in e for e in errors), errors
    assert not any(c.error for c in beside), "the direct client was affected by the stall"


# -- statement and lock timeouts hit under load -----------------------------------------------


async def hold_row_locks(url: str, key: str, until: float, hold: float, gap: float) -> int:
    """Lock ``key``'s row FOR UPDATE for ``hold`` seconds every ``hold + gap`` seconds."""
    u = make_url(url)
    times = 0
    async with await psycopg.AsyncConnection.connect(
        host=u.host, port=u.port, user=u.username, dbname=u.database
    ) as conn:
        while time.time() < until:
            async with conn.transaction():
                await conn.execute(
                    "SELECT 1 FROM leases WHERE key = %s FOR UPDATE", (key.encode(),)
                )
                times += 1
                await asyncio.sleep(hold)
            await asyncio.sleep(gap)
    return times


async def test_lock_and_statement_timeouts_under_load(fresh_database: str) -> None:
    timeout = 0.5
    # One provider only has a lock timeout, the other only a statement timeout (both 0.4 s).
    lock_limited = SqlLeaseProvider.from_url(
        fresh_database,
        timeout=timeout,
        connect_args={"server_settings": {"statement_timeout": "0"}},
    )
    statement_limited = SqlLeaseProvider.from_url(
        fresh_database, timeout=timeout, connect_args={"server_settings": {"lock_timeout": "0"}}
    )
    keys = ("locked", "free")
    try:
        cal = await calibrate(lock_limited)
        seeds = [await attempt(lock_limited, "seed", "acquire", k, "seed", ttl=50) for k in keys]
        assert all(c.result[0] for c in seeds)  # the rows must exist to be locked
        start = time.time()
        plan = Plan(keys=keys, until=start + 4.5)
        by_lock, by_statement, locks = await asyncio.gather(
            run_clients(lock_limited, "lock", plan, 41, tasks=2),
            run_clients(statement_limited, "stmt", plan, 42, tasks=2),
            hold_row_locks(fresh_database, "locked", start + 3.0, hold=0.7, gap=0.3),
        )
        cal = cal.join(await calibrate(lock_limited))
    finally:
        await lock_limited.aclose()
        await statement_limited.aclose()
    errors = verify(
        "lock/statement timeout",
        [(seeds + by_lock, cal), (by_statement, cal)],
        timeout=timeout,
        healed_at=start + 3.3,
        injected=locks,
    )
    # The server cancels a statement stuck on a lock (55P03) or running too long (57014):
    # certainly not applied. A call can also hit the client-side deadline first (no SQLSTATE,
    # outcome unknown): lock_timeout bounds each lock wait, and a statement queued behind
    # another waiter waits twice (tuple lock, then the holder's transaction) when, as here,
    # no statement_timeout bounds the whole. A call that queued for a coalesced batch has less
    # than its whole timeout left when its statement starts: it waits for a lock at most the
    # server's share of what is left (55P03 then, on either provider), so that it too ends
    # with "nothing applied" rather than at its deadline.
    failed = [c for c in by_lock + by_statement if c.error]
    assert all(c.error == "LeaseTimeoutError" for c in failed), errors
    assert all(c.unknown == (c.sqlstate is None) for c in failed), errors
    lock_states = {c.sqlstate for c in by_lock if c.error}
    statement_states = {c.sqlstate for c in by_statement if c.error}
    assert "55P03" in lock_states and lock_states <= {"55P03", None}, lock_states
    assert "57014" in statement_states, statement_states
    assert statement_states <= {"57014", "55P03", None}, statement_states


# -- the connection pool is exhausted ---------------------------------------------------------


@pytest.mark.parametrize("engine_owner", ["provider", "caller"])
async def test_exhausted_pool_times_out_cleanly_and_recovers(
    fresh_database: str, engine_owner: str
) -> None:
    """One connection, thirty clients, the row they want locked: all give up in time."""
    timeout = 0.3
    engine = None
    if engine_owner == "provider":
        provider = SqlLeaseProvider.from_url(
            fresh_database, timeout=timeout, pool_size=1, max_overflow=0
        )
    else:  # no server-side timeouts: the client deadline and the cancel path do the work
        url = make_url(fresh_database).set(drivername="postgresql+asyncpg")
        engine = create_async_engine(url, pool_size=1, max_overflow=0, pool_timeout=timeout)
        provider = SqlLeaseProvider(engine, timeout=timeout)
    try:
        cal = await calibrate(provider)
        seed = await attempt(provider, "seed", "acquire", "busy", "a", ttl=60_000)
        assert seed.result[0]
        u = make_url(fresh_database)
        async with (
            await psycopg.AsyncConnection.connect(
                host=u.host, port=u.port, user=u.username, dbname=u.database
            ) as locker,
            locker.transaction(),
        ):
            await locker.execute("SELECT 1 FROM leases WHERE key = %s FOR UPDATE", (b"busy",))
            # A call on "busy" takes the only connection and waits on the row lock; the
            # others queue for the connection. Every call must give up within the timeout.
            plan = Plan(keys=("busy", "other"), ops=3, pause=0.0, error_pause=0.0)
            outcomes = await run_clients(provider, "pool", plan, 51, tasks=30)
        healed_at = time.time() + 0.3
        await asyncio.sleep(0.3)
        # One client at a time on the one connection: no queue, so a timeout now would mean
        # the pool did not recover (thirty queued clients could time out on a busy machine).
        plan = Plan(keys=("busy", "other"), ops=15, pause=0.0)
        after = await run_clients(provider, "after", plan, 52, tasks=1)
    finally:
        await provider.aclose()
    if engine is not None:
        # Cancelled statements were cleaned up and every connection came back to the pool.
        assert engine.pool.checkedout() == 0, "a connection leaked from the caller's pool"
        await engine.dispose()
    errors = verify(
        f"pool exhausted ({engine_owner}'s engine)",
        [([seed, *outcomes, *after], cal)],
        timeout=timeout,
        healed_at=healed_at,
        injected=1,
    )
    assert any("LeaseTimeoutError" in e for e in errors), errors
