"""No look-alike and no pooled neighbour's session state changes who holds a lease (issue 24).

In the `hostile` database (see `conftest`: the co-tenant's look-alikes of every function and
operator the statements name, first on the runtime role's search path; every PgBouncer server
connection left with a neighbour's ``SET search_path`` and a temporary ``leases`` in which
``intruder`` holds every key) the whole contract runs in every Python mode: async (asyncpg,
and through PgBouncer with ``pooler="transaction"``, one call at a time and coalesced), sync
(psycopg, and through PgBouncer), the CLI (direct and through PgBouncer). After each: the
answers are the contract's, the real table holds what the answers said, no look-alike ran,
and the neighbours' session state is still there (the run really met it). Then two processes
race on hot keys (async direct, sync through PgBouncer): one live owner at a time, fences
increasing.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine

from sql_lease import LeaseLost, SqlLeaseProvider
from sql_lease import sync as sync_lease

from ..integration._race_workers import hammer
from ..integration.test_races import check_history, pool
from ..sync._workers import hammer as sync_hammer
from .conftest import PATH, Hostile

pytestmark = [pytest.mark.infra, pytest.mark.timeout(120)]


def test_the_environment_is_hostile(hostile: Hostile) -> None:
    """The suite's teeth: as the runtime role, unqualified names reach the look-alikes, and
    each pooled server connection shows the neighbour's search path and temporary table."""
    assert len(hostile.planted) > 40, hostile.planted
    before = hostile.planted_calls()
    with psycopg.connect(make_plain(hostile.direct), autocommit=True) as conn:
        [(path,)] = conn.execute("SHOW search_path").fetchall()
        assert path == PATH
        [(wrong,)] = conn.execute("SELECT clock_timestamp() = 'epoch'").fetchall()
        assert wrong is True  # evil.clock_timestamp() and evil."=" both ran
    assert hostile.planted_calls() > before
    hostile.plant_sessions()
    assert hostile.session_states() == [(PATH, True)] * hostile.bouncer.pool_size


def make_plain(url: str) -> str:
    return url.replace("+asyncpg", "").replace("+psycopg", "")


def _after(hostile: Hostile, before: tuple[int, int], pooled: bool) -> None:
    drivers = hostile.check(before)
    print("look-alikes the drivers' own queries reached:", drivers)
    if pooled:
        states = hostile.session_states()
        assert states == [(PATH, True)] * len(states), states


async def _async_contract(p: SqlLeaseProvider, hostile: Hostile) -> None:
    first = await p.acquire_lease("job", "a", 60_000)
    assert first.acquired and first.owner == "a" and first.fence is not None
    refused = await p.acquire_lease("job", "b", 60_000)
    assert (refused.acquired, refused.owner, refused.fence) == (False, "a", first.fence)
    assert await p.renew_lease("job", "a", 60_000)
    assert not await p.renew_lease("job", "b", 60_000)
    assert await p.transfer_lease("job", "a", "b", 60_000)
    lease = await p.get_lease("job")
    assert lease is not None and lease.owner == "b" and lease.fence > first.fence
    assert await p.get_lease_owner("job") == "b"
    truth = hostile.truth("job")
    assert truth is not None and truth[:2] == ("b", lease.fence)
    assert lease.expires_at == truth[2]
    assert [x.key for x in await p.list_leases()] == ["job"]
    engine = create_async_engine(hostile.direct)
    try:
        async with engine.begin() as conn:
            await p.guard(conn, "job", lease.fence)
        with pytest.raises(LeaseLost):
            async with engine.begin() as conn:
                await p.guard(conn, "job", first.fence)
    finally:
        await engine.dispose()
    await p.release_lease("job", "b")
    assert await p.get_lease_owner("job") is None and hostile.truth("job") is None
    again = await p.acquire_lease("job", "c", 60_000)
    assert again.acquired and again.fence is not None and again.fence > lease.fence
    assert (await p.acquire_lease("k", "a", 1)).acquired
    await asyncio.sleep(0.05)
    assert await p.get_lease_owner("k") is None
    assert await p.purge_expired(min_age_ms=1) == 1
    assert await p.force_release("job")
    # Many calls at once: the coalesced statements (one write batch, one read batch).
    keys = [f"b{i}" for i in range(8)]
    grants = await asyncio.gather(*(p.acquire_lease(k, f"o{k}", 60_000) for k in keys))
    assert all(g.acquired for g in grants)
    renewed = await asyncio.gather(*(p.renew_lease(k, f"o{k}", 60_000) for k in keys))
    owners = await asyncio.gather(*(p.get_lease_owner(k) for k in keys))
    assert all(renewed) and owners == [f"o{k}" for k in keys]
    moved = await asyncio.gather(*(p.transfer_lease(k, f"o{k}", "z", 60_000) for k in keys))
    assert all(moved)
    await asyncio.gather(*(p.release_lease(k, "z") for k in keys))
    assert [hostile.truth(k) for k in keys] == [None] * len(keys)


@pytest.mark.parametrize(
    ("pooled", "coalesce"),
    [(False, True), (False, "always"), (True, True), (True, "always")],
    ids=["asyncpg", "asyncpg-batched", "pooler", "pooler-batched"],
)
async def test_async_contract_is_untouched(hostile: Hostile, pooled: bool, coalesce: Any) -> None:
    hostile.plant_sessions()
    hostile.clear()
    before = hostile.mark()
    url = hostile.pooled if pooled else hostile.direct
    pooler = "transaction" if pooled else None
    p = SqlLeaseProvider.from_url(url, timeout=10, pooler=pooler, coalesce=coalesce)
    try:
        await _async_contract(p, hostile)
    finally:
        await p.aclose()
    _after(hostile, before, pooled)


@pytest.mark.parametrize("pooled", [False, True], ids=["psycopg", "pooler"])
def test_sync_contract_is_untouched(hostile: Hostile, pooled: bool) -> None:
    hostile.plant_sessions()
    hostile.clear()
    before = hostile.mark()
    url = hostile.pooled if pooled else hostile.direct
    p = sync_lease.SqlLeaseProvider.from_url(
        url, timeout=10, pooler="transaction" if pooled else None
    )
    try:
        first = p.acquire_lease("job", "a", 60_000)
        assert first.acquired and first.fence is not None
        refused = p.acquire_lease("job", "b", 60_000)
        assert (refused.acquired, refused.owner, refused.fence) == (False, "a", first.fence)
        assert p.renew_lease("job", "a", 60_000) and not p.renew_lease("job", "b", 60_000)
        assert p.transfer_lease("job", "a", "b", 60_000)
        lease = p.get_lease("job")
        assert lease is not None and lease.owner == "b" and lease.fence > first.fence
        truth = hostile.truth("job")
        assert truth is not None and truth[:2] == ("b", lease.fence)
        assert p.get_lease_owner("job") == "b"
        assert [x.key for x in p.list_leases()] == ["job"]
        assert p.renew_leases([("job", "b"), ("job2", "b")], 60_000) == [True, False]
        engine = create_engine(
            make_plain(hostile.direct).replace("postgresql:", "postgresql+psycopg:")
        )
        try:
            with engine.begin() as conn:
                p.guard(conn, "job", lease.fence)
                conn.execute(text("SELECT 1"))
            with pytest.raises(LeaseLost), engine.begin() as conn:
                p.guard(conn, "job", first.fence)
        finally:
            engine.dispose()
        p.release_lease("job", "b")
        assert p.get_lease_owner("job") is None and hostile.truth("job") is None
        again = p.acquire_lease("job", "c", 60_000)
        assert again.acquired and again.fence is not None and again.fence > lease.fence
        assert p.acquire_lease("k", "a", 1).acquired
        time.sleep(0.05)
        assert p.purge_expired(min_age_ms=1) == 1
        assert p.mark_wanted("job", 1_000) is not None
        assert p.force_release("job")
        assert hostile.truth("job") is None
    finally:
        p.close()
    _after(hostile, before, pooled)


@pytest.mark.parametrize("pooled", [False, True], ids=["direct", "pooler"])
def test_cli_is_untouched(hostile: Hostile, pooled: bool) -> None:
    hostile.plant_sessions()
    hostile.clear()
    before = hostile.mark()
    url = hostile.pooled if pooled else make_plain(hostile.direct)
    extra = ["--pooler", "transaction"] if pooled else []

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sql_lease", *args, "--url", url, *extra, "--quiet"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    got = cli("acquire", "job", "a", "--ttl", "60s", "--json")
    assert got.returncode == 0, got.stderr
    fence = json.loads(got.stdout)["fence"]
    refused = cli("acquire", "job", "b", "--ttl", "60s", "--json")
    assert refused.returncode == 1 and json.loads(refused.stdout)["owner"] == "a", refused
    assert cli("renew", "job", "a", "--ttl", "60s").returncode == 0
    shown = cli("get", "job", "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["fence"] == fence, shown
    listed = cli("list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [x["key"] for x in json.loads(listed.stdout)["leases"]] == ["job"], listed.stdout
    truth = hostile.truth("job")
    assert truth is not None and truth[:2] == ("a", fence)
    assert cli("release", "job", "a").returncode == 0
    assert hostile.truth("job") is None
    assert cli("acquire", "job", "c", "--ttl", "60s").returncode == 0
    assert cli("force-release", "job").returncode == 0
    assert cli("purge", "--min-age", "0s").returncode == 0
    assert hostile.sql("SELECT count(*) FROM public.leases") == [(0,)]
    _after(hostile, before, pooled)


@pytest.mark.parametrize("mode", ["async-direct", "sync-pooler"])
def test_two_processes_racing_on_hot_keys_never_overlap(hostile: Hostile, mode: str) -> None:
    hostile.plant_sessions()
    hostile.clear()
    before = hostile.mark()
    run = uuid.uuid4().hex[:6]
    keys = ["hot", "job2", f"hot{run}"]
    with pool(2) as ex:
        if mode == "async-direct":
            futures = [ex.submit(hammer, hostile.direct, w, keys, 3.0, 11 + w) for w in range(2)]
        else:
            futures = [
                ex.submit(sync_hammer, hostile.pooled, w, keys, 3.0, 2, "transaction")
                for w in range(2)
            ]
        results: list[dict[str, Any]] = [f.result(timeout=90) for f in futures]
    events = [e for r in results for e in r["events"]]
    stats = check_history(events)
    assert stats["tenures"] > 10 and stats["failed_acquires"] > 10, stats
    _after(hostile, before, mode.endswith("pooler"))


async def _counting_contract(p: SqlLeaseProvider, hostile: Hostile) -> None:
    grants = [await p.acquire_lease("sem", f"w{i}", 60_000, limit=2) for i in range(3)]
    assert [g.acquired for g in grants] == [True, True, False]
    assert grants[1].fence is not None and grants[0].fence is not None
    assert grants[1].fence > grants[0].fence
    assert [h.owner for h in await p.get_lease_holders("sem")] == ["w0", "w1"]
    assert await p.renew_lease("sem", "w0", 60_000)
    assert await p.transfer_lease("sem", "w1", "w2", 60_000)
    await p.release_lease("sem", "w0")
    assert [h.owner for h in await p.get_lease_holders("sem")] == ["w2"]
    assert (await p.acquire_lease("meta", "m", 60_000, metadata="x")).acquired
    lease = await p.get_lease("meta")
    assert lease is not None and (lease.owner, lease.metadata) == ("m", "x")
    taken = await p.acquire_leases(["a1", "a2"], "me", 60_000)
    assert taken.acquired
    refused = await p.acquire_leases(["a3", "sem"], "me", 60_000)
    assert (refused.acquired, refused.blocked_key, refused.blocked_by) == (False, "sem", "w2")
    assert await p.release_leases(["a1", "a2"], "me") == 2


@pytest.mark.parametrize("pooled", [False, True], ids=["asyncpg", "pooler"])
async def test_counting_calls_are_untouched(hostile: Hostile, pooled: bool) -> None:
    hostile.plant_sessions()
    hostile.clear()
    before = hostile.mark()
    url = hostile.pooled if pooled else hostile.direct
    p = SqlLeaseProvider.from_url(url, timeout=10, pooler="transaction" if pooled else None)
    try:
        await _counting_contract(p, hostile)
    finally:
        await p.aclose()
    _after(hostile, before, pooled)
