"""Counting leases, metadata and all-or-none calls on Citus (migration 0011), through the
coordinator: the one-key functions distributed by the key, each counting call on one shard
(Citus's own counters), a ``limit=3`` race of processes that never has more than 3 live
holders by database time and reaches 3, an all-or-none race over keys on both workers (no
deadlock, no partial grant, no overlapping tenures), and the sync provider and pooler mode."""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sql_lease import SqlLeaseProvider, migrate
from sql_lease.sync import SqlLeaseProvider as SyncProvider

from .._citus import citus_workers
from ._race import AllOrNone, all_or_none_race, count_race, judge, most_at_once

pytestmark = pytest.mark.citus

LEASES = "'public.leases'::regclass"
STATS = {"server_settings": {"citus.enable_stat_counters": "on"}}


def _sql(url: str, port: int | None = None) -> psycopg.Connection[tuple[Any, ...]]:
    u = make_url(url)
    return psycopg.connect(
        host=u.host, port=port or u.port, user=u.username, dbname=u.database, autocommit=True
    )


@pytest.fixture(scope="module")
def migrated(citus_url: str) -> str:
    migrate.upgrade(citus_url)
    return citus_url


@pytest.fixture
def db(migrated: str) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    with _sql(migrated) as conn:
        conn.execute("TRUNCATE leases")
        yield conn


def _counters(db: psycopg.Connection[tuple[Any, ...]]) -> tuple[int, int]:
    row = db.execute(
        "SELECT query_execution_single_shard, query_execution_multi_shard"
        " FROM citus_stat_counters WHERE name = current_database()"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _port_of(db: psycopg.Connection[tuple[Any, ...]], key: str) -> int:
    row = db.execute(
        "SELECT nodeport FROM citus_shards WHERE shardid ="
        f" get_shard_id_for_distribution_column({LEASES}, %s::bytea)",
        (key.encode(),),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _on_each_worker(db: psycopg.Connection[tuple[Any, ...]], prefix: str, n: int) -> list[str]:
    """``n`` keys on each worker, alternating workers."""
    by_port: dict[int, list[str]] = {}
    i = 0
    while len(by_port) < 2 or min(len(v) for v in by_port.values()) < n:
        key = f"{prefix}-{i}"
        by_port.setdefault(_port_of(db, key), []).append(key)
        i += 1
    a, b = (keys[:n] for keys in by_port.values())
    return [k for pair in zip(a, b, strict=True) for k in pair]


def test_the_counting_functions_are_distributed_by_key(
    db: psycopg.Connection[tuple[Any, ...]],
) -> None:
    """0011's one-key functions are distributed by their first argument and colocated with
    ``leases``; its all-or-none functions are not (they span workers)."""
    colocation = db.execute(
        f"SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = {LEASES}"
    ).fetchone()
    rows = db.execute(
        "SELECT p.proname, o.distribution_argument_index, o.colocationid FROM pg_proc p"
        " LEFT JOIN pg_dist_object o ON o.classid = 'pg_proc'::regclass AND o.objid = p.oid"
        " WHERE p.proname LIKE 'leases\\_count\\_%' ORDER BY 1"
    ).fetchall()
    assert colocation is not None
    found = {name: (index, colo) for name, index, colo in rows}
    one_key = ("acquire", "holders", "renew", "release", "transfer")
    assert {f"leases_count_{n}" for n in one_key} <= set(found)
    for n in one_key:
        assert found[f"leases_count_{n}"] == (0, colocation[0]), n
    for n in ("acquire_all", "release_all", "ensure"):
        assert found[f"leases_count_{n}"][0] is None, n


def test_each_counting_call_runs_on_one_shard(
    migrated: str, db: psycopg.Connection[tuple[Any, ...]]
) -> None:
    """Citus's own counters: every call on a counting key is single-shard executions only (the
    delegated functions); a call of the plain contract that misses on a counting row sends its
    plain statement and then the counting one, two single-shard executions."""

    async def calls() -> list[tuple[str, tuple[int, int]]]:
        p = SqlLeaseProvider.from_url(migrated, timeout=30, connect_args=STATS)
        seen = []
        try:
            steps: list[tuple[str, Callable[[], Any]]] = [
                ("count acquire", lambda: p.acquire_lease("c", "a", 60_000, limit=3)),
                ("count acquire b", lambda: p.acquire_lease("c", "b", 60_000, limit=3)),
                ("metadata acquire", lambda: p.acquire_lease("m", "a", 60_000, metadata="x")),
                ("holders", lambda: p.get_lease_holders("c")),
                ("renew", lambda: p.renew_lease("c", "a", 60_000)),
                ("transfer", lambda: p.transfer_lease("c", "a", "z", 60_000)),
                ("release", lambda: p.release_lease("c", "b")),
            ]
            await p.get_lease("warm-up")
            for name, step in steps:
                first = _counters(db)
                await step()
                last = _counters(db)
                seen.append((name, (last[0] - first[0], last[1] - first[1])))
        finally:
            await p.aclose()
        return seen

    seen = dict(asyncio.run(calls()))
    print("\n(single-shard, multi-shard) executions per counting call:", seen)
    assert all(multi == 0 for _, multi in seen.values()), seen
    for name in ("count acquire", "count acquire b", "metadata acquire", "holders"):
        assert seen[name] == (1, 0), (name, seen)
    for name in ("renew", "transfer", "release"):  # the plain statement's miss, then its grant
        assert seen[name] == (2, 0), (name, seen)


@pytest.mark.parametrize("pooler", [False, True], ids=["direct", "pooler"])
def test_all_or_none_runs_one_shard_at_a_time_across_both_workers(
    migrated: str, db: psycopg.Connection[tuple[Any, ...]], pooler: bool
) -> None:
    """``acquire_leases`` of 6 keys on both workers: one coordinator call whose statements each
    touch one shard, none multi-shard, also under pooler mode's generic plans;
    ``release_leases``: a lock and a write per key."""
    keys = _on_each_worker(db, "aon", 3)
    options: dict[str, Any] = {"pooler": "transaction"} if pooler else {}
    # Counters on for every new session (pooler mode takes no startup settings).
    name = db.execute("SELECT current_database()").fetchone()
    assert name is not None
    db.execute(f'ALTER DATABASE "{name[0]}" SET citus.enable_stat_counters = on')

    async def run() -> list[tuple[int, int]]:
        p = SqlLeaseProvider.from_url(migrated, timeout=30, **options)
        try:
            await p.get_lease("warm-up")
            seen = [_counters(db)]
            for _ in range(2):  # rows made on the first round, there on the second
                got.append((await p.acquire_leases(keys, "me", 60_000)).acquired)
                seen.append(_counters(db))
                released.append(await p.release_leases(keys, "me"))
                seen.append(_counters(db))
        finally:
            await p.aclose()
        return [(b[0] - a[0], b[1] - a[1]) for a, b in itertools.pairwise(seen)]

    got: list[bool] = []
    released: list[int] = []
    fresh, freed, taken, freed_again = asyncio.run(run())
    print(
        "\n(single, multi) acquire_leases of 6 new keys, release_leases, then again:"
        f" {fresh} {freed} {taken} {freed_again}"
    )
    assert got == [True, True] and released == [6, 6]
    assert fresh == (24, 0)  # per key: no row to lock, a placeholder, its lock, the write
    assert taken == (12, 0)  # per key: its lock, the write
    assert freed == freed_again == (12, 0)


def test_a_limit_3_race_of_processes_never_has_more_than_3_holders(
    migrated: str, db: psycopg.Connection[tuple[Any, ...]]
) -> None:
    """6 processes x 2 clients contend for a ``limit=3`` key for 6 s: by database time no
    instant has more than 3 live grants, 3 at once is reached, and fences rise with every
    grant."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(6, mp_context=ctx) as pool:
        futures = [pool.submit(count_race, migrated, f"p{i}", "sem", 3, 2, 6.0) for i in range(6)]
        results = [f.result(timeout=120) for f in futures]
    tenures = [t for ts, _ in results for t in ts]
    errors = sum(e for _, e in results)
    most = most_at_once(tenures)
    fences = [t[2] for t in sorted(tenures, key=lambda t: t[3])]
    print(
        f"\nlimit=3 race: {len(tenures)} grants, {len({t[1] for t in tenures})} owners,"
        f" most live at once {most}, errors {errors}"
    )
    assert errors == 0
    assert len(tenures) > 100
    assert most == 3
    assert len(set(fences)) == len(fences) and fences == sorted(fences)


def test_an_all_or_none_race_across_both_workers(
    migrated: str, db: psycopg.Connection[tuple[Any, ...]]
) -> None:
    """4 processes take overlapping sets of keys spread over both workers (each set given in a
    shuffled order) for 8 s: no call fails (no deadlock), no refused call leaves a key taken,
    no two tenures of a key overlap and its fences rise."""
    a0, b0, a1, b1, a2, b2 = _on_each_worker(db, "set", 3)
    sets = [[a0, b0, a1], [a1, b1, b0], [b1, a2, a0], [b2, a2, b0, a1]]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(4, mp_context=ctx) as pool:
        futures = [
            pool.submit(all_or_none_race, migrated, f"p{i}", sets[i:] + sets[:i], 8.0)
            for i in range(4)
        ]
        outs: list[AllOrNone] = [f.result(timeout=120) for f in futures]
    v = judge([(o.tenures, o.errors) for o in outs])
    refused = sum(o.refused for o in outs)
    partial = sum(o.partial for o in outs)
    print(
        f"\nall-or-none race: tenures per key {v.counts()}, refused {refused}, partial"
        f" {partial}, overlapping {v.overlaps}, fences not rising {v.backwards},"
        f" errors {v.errors}"
    )
    assert v.errors == 0
    assert partial == 0
    assert refused > 0  # the sets did contend
    assert len(v.by_key) == 6 and min(v.counts().values()) > 10
    assert v.overlaps == 0
    assert v.backwards == 0


@pytest.mark.parametrize("pooler", [False, True], ids=["direct", "pooler"])
def test_the_sync_provider_counts_on_citus(
    migrated: str, db: psycopg.Connection[tuple[Any, ...]], pooler: bool
) -> None:
    options: dict[str, Any] = {"pooler": "transaction"} if pooler else {}
    keys = _on_each_worker(db, "sync", 2)
    with SyncProvider.from_url(migrated, timeout=10, **options) as p:
        got = [p.acquire_lease("s", o, 60_000, limit=2).acquired for o in ("a", "b", "c")]
        assert got == [True, True, False]
        assert [h.owner for h in p.get_lease_holders("s")] == ["a", "b"]
        assert p.acquire_lease("meta", "a", 60_000, metadata=b"\x00x").acquired
        lease = p.get_lease("meta")
        assert lease is not None and lease.metadata == b"\x00x"
        assert p.acquire_leases(keys, "me", 60_000).acquired
        refused = p.acquire_leases([keys[0], "free"], "other", 60_000)
        assert not refused.acquired and refused.blocked_by == "me"
        assert p.get_lease_owner("free") is None  # none taken
        assert p.release_leases(keys, "me") == 4


def test_pooler_mode_counts_on_citus(
    migrated: str, db: psycopg.Connection[tuple[Any, ...]]
) -> None:
    """The async provider behind ``pooler="transaction"``: its first counting statement is
    refused as plain text, then it sends 0011's calls."""
    keys = _on_each_worker(db, "pool", 2)

    async def run() -> None:
        p = SqlLeaseProvider.from_url(migrated, timeout=10, pooler="transaction")
        try:
            got = [await p.acquire_lease("q", o, 60_000, limit=2) for o in ("a", "b", "c")]
            assert [g.acquired for g in got] == [True, True, False]
            assert got[2].owner == "a"  # the holder whose grant ends first
            assert await p.transfer_lease("q", "a", "z", 60_000)
            assert [h.owner for h in await p.get_lease_holders("q")] == ["b", "z"]
            assert (await p.acquire_leases(keys, "me", 60_000)).acquired
            assert await p.release_leases(keys, "me") == 4
        finally:
            await p.aclose()

    asyncio.run(run())


def test_fences_rise_across_a_shard_move_of_a_counting_key(
    migrated: str, db: psycopg.Connection[tuple[Any, ...]]
) -> None:
    """A counting key's shard moves to the other worker: its next grant's fence is above
    every earlier one (the row moved with its shard)."""
    from .test_citus import _move

    async def grant(owner: str) -> int:
        p = SqlLeaseProvider.from_url(migrated, timeout=30)
        try:
            got = await p.acquire_lease("moving", owner, 60_000, limit=2)
            assert got.acquired and got.fence is not None
            return got.fence
        finally:
            await p.aclose()

    before = [asyncio.run(grant(o)) for o in ("a", "b")]
    start = time.monotonic()
    moved = _move(db, "moving")
    asyncio.run(_release(migrated, "moving", "a"))
    after = asyncio.run(grant("c"))
    print(f"\nmoved {moved} in {time.monotonic() - start:.1f} s; fences {before} -> {after}")
    assert moved[0] != moved[1]
    assert before[0] < before[1] < after


async def _release(url: str, key: str, owner: str) -> None:
    p = SqlLeaseProvider.from_url(url, timeout=30)
    try:
        await p.release_lease(key, owner)
    finally:
        await p.aclose()


def test_0011_on_a_populated_distributed_table_up_down_and_up(
    make_database: Callable[[], str],
) -> None:
    """0011 run on its own over a distributed table that holds leases (the floor is read from
    every shard before the functions are made, in one transaction); a held key's next grant is
    above its old fence; down to 0010 drops the functions on every node; up again works."""
    url = make_database()
    migrate.upgrade(url, "0010")

    async def take(key: str, owner: str, limit: int = 1) -> int:
        p = SqlLeaseProvider.from_url(url, timeout=30)
        try:
            got = await p.acquire_lease(key, owner, 60_000, limit=limit)
            assert got.acquired and got.fence is not None
            return got.fence
        finally:
            await p.aclose()

    old = [asyncio.run(take(f"old-{i}", "a")) for i in range(20)]
    migrate.upgrade(url)
    asyncio.run(_release(url, "old-0", "a"))
    assert asyncio.run(take("old-0", "b", limit=2)) > max(old)
    with _sql(url) as conn:
        assert conn.execute("SELECT count(*) FROM leases").fetchone() == (20,)
    migrate.downgrade(url, "0010")
    for port in _ports():
        with _sql(url, port) as conn:
            found = conn.execute(
                "SELECT count(*) FROM pg_proc WHERE proname LIKE 'leases\\_count\\_%'"
            ).fetchone()
            assert found == (0,), port
    migrate.upgrade(url)
    assert asyncio.run(take("new", "c", limit=3)) > max(old)


def _ports() -> list[int | None]:
    """The coordinator (None: the URL's port) and the workers."""
    return [None, *citus_workers()]
