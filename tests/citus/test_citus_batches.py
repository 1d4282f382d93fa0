"""Scale-out on Citus, part two: batches by worker, a worker crash in the middle of a race, and
the sync provider and pooler mode through the coordinator."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sql_lease import SqlLeaseProvider, migrate
from sql_lease.backends.postgres.citus import SHARDS_SQL, Detected
from sql_lease.errors import LeaseLimitMismatchError
from sql_lease.sync import SqlLeaseProvider as SyncProvider

from ._race import await_taken, judge, race

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


def test_the_client_s_hash_finds_citus_s_worker(
    migrated: str, db: psycopg.Connection[tuple[Any, ...]]
) -> None:
    """For 1,000 keys, the worker the provider computes (PostgreSQL's hash, the shards'
    ranges and placements) is the one Citus places the key on."""
    detected = Detected()
    detected.learn(db.execute("SELECT 'public', 'leases'").fetchall(), db.execute(SHARDS_SQL))
    shards = detected.shards[("public", "leases")]
    keys = [f"key-{i}\x00{i * 7}".encode() for i in range(1_000)]
    wrong = 0
    workers = set()
    for key in keys:
        row = db.execute(
            "SELECT p.groupid FROM pg_dist_placement p WHERE p.shardid ="
            f" get_shard_id_for_distribution_column({LEASES}, %s::bytea)",
            (key,),
        ).fetchone()
        assert row is not None
        workers.add(row[0])
        wrong += shards.group_of(key) != row[0]
    print(f"\n1,000 keys over worker groups {sorted(workers)}: {wrong} placed elsewhere")
    assert wrong == 0 and len(workers) == 2


def test_renew_many_of_1000_keys_is_one_delegated_call_per_worker(
    migrated: str, db: psycopg.Connection[tuple[Any, ...]]
) -> None:
    """The contract's bulk renewal through the coordinator: one single-shard (delegated)
    execution per worker, none multi-shard, every lease renewed within the call's timeout."""

    async def run() -> tuple[int, float, tuple[int, int]]:
        p = SqlLeaseProvider.from_url(migrated, timeout=10, connect_args=STATS)
        try:
            keys = [f"bulk-{i}" for i in range(1_000)]
            await asyncio.gather(*(p.acquire_lease(k, "me", 60_000) for k in keys))
            await p.get_lease("warm-up")
            first = _counters(db)
            start = time.monotonic()
            renewed = await p.renew_many([(k, "me") for k in keys], 60_000)
            took = time.monotonic() - start
            last = _counters(db)
            return (
                sum(r is not None for r in renewed),
                took,
                (last[0] - first[0], last[1] - first[1]),
            )
        finally:
            await p.aclose()

    renewed, took, (single, multi) = asyncio.run(run())
    print(f"\nrenew_many of 1,000: {took * 1000:.0f} ms; single-shard {single}, multi {multi}")
    assert renewed == 1_000
    assert (single, multi) == (2, 0)


def test_coalesced_batches_go_as_one_call_per_worker(
    migrated: str, db: psycopg.Connection[tuple[Any, ...]]
) -> None:
    """Every call through the queue (coalesce="always"): each batch is at most one delegated
    call per worker, never a multi-shard statement, and every caller gets its own answer."""

    async def run() -> tuple[int, int, tuple[int, int], int]:
        p = SqlLeaseProvider.from_url(migrated, timeout=10, connect_args=STATS, coalesce="always")
        try:
            keys = [f"c-{i}" for i in range(300)]
            await p.get_lease("warm-up")
            first = _counters(db)
            got = await asyncio.gather(*(p.acquire_lease(k, f"o{k}", 60_000) for k in keys))
            renewed = await asyncio.gather(*(p.renew_lease(k, f"o{k}", 60_000) for k in keys))
            owners = await asyncio.gather(*(p.get_lease_owner(k) for k in keys))
            last = _counters(db)
            stats = p.coalescing_stats()
            batches = sum(b for b, _ in stats.values())
            right = sum(
                g.acquired and r and o == f"o{k}"
                for k, g, r, o in zip(keys, got, renewed, owners, strict=True)
            )
            return batches, right, (last[0] - first[0], last[1] - first[1]), len(keys)
        finally:
            await p.aclose()

    batches, right, (single, multi), n = asyncio.run(run())
    print(
        f"\n{n} keys x 3 calls: {batches} batches, {single} single-shard executions, {multi} multi"
    )
    assert right == n
    assert multi == 0
    assert batches <= single <= 2 * batches


def test_a_worker_crash_in_the_middle_of_a_race(
    migrated: str, db: psycopg.Connection[tuple[Any, ...]]
) -> None:
    """4 processes race for 3 hot keys; the worker holding the first one crashes (a backend
    killed: the worker's PostgreSQL restarts every process and recovers from its WAL) and
    comes back: no two tenures of a key overlap, a key's fences rise in tenure order, and the
    race goes on on that key after the crash. The race lasts 40 s: after a crash PostgreSQL
    syncs the whole data directory before it replays its WAL, 15 s on this machine's workers.
    Needs the workers on this machine (as ../shared/citus/cluster.sh runs them) and the right
    to signal their processes."""
    hot = ["crash-0", "crash-1", "crash-2"]
    port = db.execute(
        "SELECT nodeport FROM citus_shards WHERE shardid ="
        f" get_shard_id_for_distribution_column({LEASES}, %s::bytea)",
        (hot[0].encode(),),
    ).fetchone()
    assert port is not None
    ctx = multiprocessing.get_context("spawn")
    seconds = 40.0
    with ProcessPoolExecutor(4, mp_context=ctx) as pool:
        futures = [pool.submit(race, migrated, f"p{i}", hot, seconds) for i in range(4)]
        await_taken(db, hot[0])
        time.sleep(2)  # a few tenures before the crash
        crashed = time.monotonic()
        with _sql(migrated, int(port[0])) as victim:
            pid = victim.execute("SELECT pg_backend_pid()").fetchone()
            assert pid is not None
            os.kill(int(pid[0]), signal.SIGKILL)
        recovered = _await_worker(int(port[0])) - crashed
        results = [f.result(timeout=120) for f in futures]
    v = judge(results)
    errors, by_key, overlaps, backwards = v.errors, v.by_key, v.overlaps, v.backwards
    before = [t for t in by_key.get(hot[0], []) if t[4] < crashed]
    after = [t for t in by_key.get(hot[0], []) if t[3] > crashed]
    print(
        f"\nworker {port[0]} crashed, back in {recovered:.1f} s;"
        f" tenures per key { {k: len(v) for k, v in by_key.items()} };"
        f" on {hot[0]} before the crash {len(before)}, after {len(after)}; overlapping {overlaps};"
        f" fences not rising {backwards}; call errors {errors}"
    )
    assert overlaps == 0
    assert backwards == 0
    assert len(before) > 5 and len(after) > 5


def _await_worker(port: int) -> float:
    """When the worker at ``port`` accepts connections again (at most a minute)."""
    for _ in range(600):
        try:
            with psycopg.connect(
                host="127.0.0.1", port=port, user="postgres", dbname="postgres", connect_timeout=2
            ):
                return time.monotonic()
        except psycopg.OperationalError:
            time.sleep(0.1)
    raise AssertionError(f"the worker at {port} did not come back in a minute")


def test_the_sync_provider_runs_through_the_coordinator(
    migrated: str, db: psycopg.Connection[tuple[Any, ...]]
) -> None:
    """The sync provider sends the async one's calls: the contract's calls, bulk renewal
    (one call per worker), force-release, waiting marks."""
    with SyncProvider.from_url(migrated, timeout=10) as p:
        first = p.acquire_lease("s", "a", 60_000)
        assert first.acquired and first.fence is not None
        assert not p.acquire_lease("s", "b", 60_000).acquired
        assert p.renew_lease("s", "a", 60_000)
        assert not p.renew_lease("s", "b", 60_000)  # a miss: no counting statement sent
        assert p.transfer_lease("s", "a", "b", 60_000)
        lease = p.get_lease("s")
        assert lease is not None and lease.owner == "b" and lease.fence > first.fence
        assert p.mark_wanted("s", 1_000) is not None
        p.release_lease("s", "b")
        assert p.get_lease_owner("s") is None
        keys = [f"sync-{i}" for i in range(500)]
        for k in keys:
            assert p.acquire_lease(k, "me", 60_000).acquired
        assert all(r is not None for r in p.renew_many([(k, "me") for k in keys], 60_000))
        assert p.force_release(keys[0])
    assert db.execute("SELECT count(*) FROM leases WHERE expires_at > now()").fetchone() == (499,)


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_pooler_mode_runs_through_the_coordinator(
    migrated: str, db: psycopg.Connection[tuple[Any, ...]], sync: bool
) -> None:
    """Pooler mode (one simple query per call, the table's functions): the one-key calls are
    Citus's delegated functions; bulk renewal, force-release and waiting marks switch to 0008's
    functions at their first refusal, and go again."""
    keys = [f"pool-{i}" for i in range(50)]
    if sync:
        with SyncProvider.from_url(migrated, timeout=10, pooler="transaction") as s:
            assert all(s.acquire_lease(k, "me", 60_000).acquired for k in keys)
            renewed = s.renew_many([(k, "me") for k in keys], 60_000)
            marked = s.mark_wanted(keys[1], 1_000)
            forced = s.force_release(keys[0])
    else:

        async def run() -> tuple[list[Any], Any, bool]:
            p = SqlLeaseProvider.from_url(migrated, timeout=10, pooler="transaction")
            try:
                got = await asyncio.gather(*(p.acquire_lease(k, "me", 60_000) for k in keys))
                assert all(g.acquired for g in got)
                renewed = await p.renew_many([(k, "me") for k in keys], 60_000)
                return renewed, await p.mark_wanted(keys[1], 1_000), await p.force_release(keys[0])
            finally:
                await p.aclose()

        renewed, marked, forced = asyncio.run(run())
    assert all(r is not None for r in renewed)
    assert marked is not None and marked.owner == "me"
    assert forced
    live = db.execute("SELECT count(*) FROM leases WHERE expires_at > now()").fetchone()
    assert live == (49,)


def test_errors_are_typed(migrated: str) -> None:
    """A counting call with another limit than the key's holders raises its typed error from
    the delegated function's row, and the provider goes on."""

    async def run() -> bool:
        p = SqlLeaseProvider.from_url(migrated, timeout=10)
        try:
            assert (await p.acquire_lease("m", "me", 60_000)).acquired
            with pytest.raises(LeaseLimitMismatchError):
                await p.acquire_lease("m", "other", 60_000, limit=3)
            return (await p.acquire_lease("m", "me", 60_000, metadata="a")).acquired
        finally:
            await p.aclose()

    assert asyncio.run(run())
