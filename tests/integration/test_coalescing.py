"""Coalescing on real databases: when batches form, what each caller gets, and what one
caller's trouble does to the others in its batch."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from sql_lease import (
    LeaseTimeoutError,
    LeaseTypeError,
    LeaseValueError,
    SqlLeaseProvider,
)
from sql_lease.backends._urls import normalize_url
from tests._observers import Recorder

WRITES = ("acquire", "renew", "release", "transfer")


def tag() -> str:
    return uuid.uuid4().hex[:10]


def totals(provider: SqlLeaseProvider, kind: str) -> tuple[int, int]:
    return provider.coalescing_stats()[kind]


async def test_a_lone_caller_never_batches(database_url: str) -> None:
    async with SqlLeaseProvider.from_url(database_url) as provider:
        key = f"lone:{tag()}"
        for _ in range(20):
            assert (await provider.acquire_lease(key, "me", 5_000)).acquired
            assert await provider.renew_lease(key, "me", 5_000)
            assert await provider.get_lease_owner(key) == "me"
            assert await provider.transfer_lease(key, "me", "you", 5_000)
            await provider.release_lease(key, "you")
        assert all(stats == (0, 0) for stats in provider.coalescing_stats().values())


async def test_concurrent_callers_share_statements_and_get_their_own_answers(
    database_url: str,
) -> None:
    async with SqlLeaseProvider.from_url(database_url, pool_size=4) as provider:
        keys = [f"many:{tag()}:{i}" for i in range(64)]
        got = await asyncio.gather(
            *(provider.acquire_lease(k, f"o{i}", 5_000) for i, k in enumerate(keys))
        )
        assert all(g.acquired and g.owner == f"o{i}" for i, g in enumerate(got))
        assert len({g.fence for g in got}) == 64  # a fence of its own each
        renewed = await asyncio.gather(
            *(
                provider.renew_lease(k, f"o{i}" if i % 2 else "nobody", 5_000)
                for i, k in enumerate(keys)
            )
        )
        assert renewed == [bool(i % 2) for i in range(64)]
        owners = await asyncio.gather(*(provider.get_lease_owner(k) for k in keys))
        assert owners == [f"o{i}" for i in range(64)]
        batches, calls = totals(provider, "acquire")
        assert batches >= 1 and calls > batches, (batches, calls)
        assert totals(provider, "renew")[1] > 0


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
async def test_writes_of_every_kind_share_one_statement(
    backend: str, database_url: str, sqlite_url: str
) -> None:
    """Acquires, renewals, transfers and releases waiting at once go out together (observers
    see a "BATCH"), each caller answered as its own one-row statement would answer it."""
    recorder = Recorder()
    t = tag()
    held = [f"mix:{t}:{i}" for i in range(12)]
    fresh = [f"new:{t}:{i}" for i in range(4)]
    async with SqlLeaseProvider.from_url(
        database_url if backend == "postgresql" else sqlite_url,
        timeout=10,
        coalesce="always",
        observer=recorder,
    ) as provider:
        before = await asyncio.gather(*(provider.acquire_lease(k, "me", 60_000) for k in held))
        recorder.statements.clear()
        got = await asyncio.gather(
            *(provider.acquire_lease(k, "new", 60_000) for k in fresh),
            provider.acquire_lease(held[0], "rival", 60_000),
            *(provider.renew_lease(k, "me", 60_000) for k in held[1:4]),
            provider.renew_lease(held[4], "rival", 60_000),
            *(provider.transfer_lease(k, "me", "you", 60_000) for k in held[5:8]),
            *(provider.release_lease(k, "me") for k in held[8:12]),
        )
        acquired, lost, renewed, not_renewed = got[:4], got[4], got[5:8], got[8]
        transferred, released = got[9:12], got[12:]
        assert all(a.acquired and a.owner == "new" for a in acquired)
        assert not lost.acquired and lost.owner == "me" and lost.fence == before[0].fence
        assert renewed == [True] * 3 and not_renewed is False
        assert transferred == [True] * 3 and released == [None] * 4
        owners = await asyncio.gather(*(provider.get_lease_owner(k) for k in held + fresh))
        assert owners == ["me"] * 5 + ["you"] * 3 + [None] * 4 + ["new"] * 4
        assert "BATCH" in recorder.operations()
        assert all(totals(provider, kind)[1] > 0 for kind in WRITES)


async def test_a_batch_carries_one_write_per_key(database_url: str) -> None:
    """Twenty owners acquire one key at once: each acquire in its own statement (so batches
    carry one call each), exactly one wins and every loser names the winner."""
    async with SqlLeaseProvider.from_url(database_url, coalesce="always") as provider:
        key = f"one:{tag()}"
        got = await asyncio.gather(
            *(provider.acquire_lease(key, f"o{i}", 5_000) for i in range(20))
        )
        winners = [g for g in got if g.acquired]
        assert len(winners) == 1
        assert all(g.owner == winners[0].owner for g in got)
        batches, calls = totals(provider, "acquire")
        assert batches == calls >= 20  # never two acquires of the key in one statement


async def test_reads_of_one_key_share_a_statement(database_url: str) -> None:
    async with SqlLeaseProvider.from_url(database_url, coalesce="always") as provider:
        key = f"read:{tag()}"
        await provider.acquire_lease(key, "holder", 5_000)
        owners = await asyncio.gather(*(provider.get_lease_owner(key) for _ in range(30)))
        assert owners == ["holder"] * 30
        batches, calls = totals(provider, "get_owner")
        assert calls == 30 and batches < 30


async def test_a_contended_key_is_answered_by_shared_holder_reads(database_url: str) -> None:
    async with SqlLeaseProvider.from_url(database_url, pool_size=4) as provider:
        key = f"hot:{tag()}"
        assert (await provider.acquire_lease(key, "holder", 10_000)).acquired
        for _ in range(5):
            got = await asyncio.gather(
                *(provider.acquire_lease(key, f"c{i}", 5_000) for i in range(32))
            )
            assert all(not g.acquired and g.owner == "holder" for g in got)
        batches, calls = totals(provider, "holder")
        assert calls > batches > 0, (batches, calls)


async def test_bad_input_fails_alone_before_any_io(database_url: str) -> None:
    async with SqlLeaseProvider.from_url(database_url, coalesce="always") as provider:
        key = f"bad:{tag()}"
        results = await asyncio.gather(
            provider.acquire_lease(key, "good", 5_000),
            provider.acquire_lease("", "bad", 5_000),
            provider.acquire_lease(f"{key}2", "good", 0),
            provider.acquire_lease(f"{key}3", "good", "5"),  # type: ignore[arg-type]
            return_exceptions=True,
        )
        assert results[0].acquired  # type: ignore[union-attr]
        assert isinstance(results[1], LeaseValueError)
        assert isinstance(results[2], LeaseValueError)
        assert isinstance(results[3], LeaseTypeError)
        assert await provider.get_lease_owner(f"{key}2") is None


def _pg_dsn(database_url: str) -> str:
    return normalize_url(database_url).set(drivername="postgresql").render_as_string(False)


async def _until_a_statement_waits_for_a_lock(admin: psycopg.Connection) -> None:
    """Poll the server's own view (an event in the database, not a guessed delay)."""
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND datname = current_database()"
    )
    for _ in range(1000):
        row = admin.execute(query).fetchone()
        if row is not None and row[0]:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no statement ever waited for the lock")


async def test_a_locked_row_does_not_fail_the_other_calls_of_its_batch(database_url: str) -> None:
    """One call's row is locked by a long transaction: its batch gives up on the lock at
    once and every call runs again on its own; the others succeed, it alone times out."""
    t = tag()
    locked, slow, free = f"locked:{t}", f"slow:{t}", [f"free:{t}:{i}" for i in range(3)]
    dsn = _pg_dsn(database_url)
    async with SqlLeaseProvider.from_url(database_url, timeout=2.0, coalesce="always") as provider:
        for key in (locked, slow, *free):
            assert (await provider.acquire_lease(key, "me", 60_000)).acquired
        with (
            psycopg.connect(dsn, autocommit=True) as admin,
            psycopg.connect(dsn) as blocker,
            psycopg.connect(dsn) as brief,
        ):
            blocker.execute("SELECT 1 FROM leases WHERE key = %s FOR UPDATE", (locked.encode(),))
            # `slow` is locked until the other calls have queued behind its renew, so that
            # they go out together in the next batch.
            brief.execute("SELECT 1 FROM leases WHERE key = %s FOR UPDATE", (slow.encode(),))
            first = asyncio.ensure_future(provider.renew_lease(slow, "me", 60_000))
            await _until_a_statement_waits_for_a_lock(admin)
            rest = [
                asyncio.ensure_future(provider.renew_lease(k, "me", 60_000))
                for k in (locked, *free)
            ]
            await asyncio.sleep(0)  # each queues on its first step
            brief.rollback()
            assert await first
            results = await asyncio.gather(*rest, return_exceptions=True)
            blocker.rollback()
        assert isinstance(results[0], LeaseTimeoutError), results[0]
        assert not results[0].outcome_unknown
        assert results[1:] == [True, True, True]
        batches, calls = totals(provider, "renew")
        assert calls == batches + 3  # the four queued calls went out as one batch


async def test_a_batched_call_stuck_on_a_lock_ends_before_its_deadline(database_url: str) -> None:
    """A call that goes out in a batch waits for a row lock at most the server's share of
    what is left of its deadline: the server ends it (55P03, nothing applied) even on an
    engine with no server-side timeouts, where a lone call would meet its client deadline."""
    t = tag()
    locked = f"held:{t}"
    engine = create_async_engine(normalize_url(database_url))
    dsn = _pg_dsn(database_url)
    try:
        provider = SqlLeaseProvider(engine, timeout=1.0, coalesce="always")
        assert (await provider.acquire_lease(locked, "me", 60_000)).acquired
        with psycopg.connect(dsn) as blocker:
            blocker.execute("SELECT 1 FROM leases WHERE key = %s FOR UPDATE", (locked.encode(),))
            for call in (
                provider.renew_lease(locked, "me", 60_000),
                provider.acquire_lease(locked, "me", 60_000),
                provider.transfer_lease(locked, "me", "you", 60_000),
                provider.release_lease(locked, "me"),
            ):
                with pytest.raises(LeaseTimeoutError) as caught:
                    await call
                assert not caught.value.outcome_unknown
                assert getattr(caught.value.__cause__, "sqlstate", None) == "55P03"
            blocker.rollback()
        assert await provider.get_lease_owner(locked) == "me"  # nothing was applied
        await provider.aclose()
    finally:
        await engine.dispose()


async def test_sqlite_batches_run_in_one_transaction(sqlite_url: str) -> None:
    async with SqlLeaseProvider.from_url(sqlite_url, timeout=10, coalesce="always") as provider:
        keys = [f"sq:{tag()}:{i}" for i in range(16)]
        got = await asyncio.gather(*(provider.acquire_lease(k, "me", 5_000) for k in keys))
        assert all(g.acquired for g in got)
        assert len({g.fence for g in got}) == 16
        assert (
            await asyncio.gather(*(provider.transfer_lease(k, "me", "you", 5_000) for k in keys))
            == [True] * 16
        )
        assert await asyncio.gather(*(provider.get_lease_owner(k) for k in keys)) == ["you"] * 16
        batches, calls = totals(provider, "acquire")
        assert calls == 16 and batches < 16


async def test_a_callers_own_engine_coalesces_too(database_url: str) -> None:
    engine = create_async_engine(normalize_url(database_url), pool_size=3)
    try:
        provider = SqlLeaseProvider(engine)
        keys = [f"own:{tag()}:{i}" for i in range(32)]
        got = await asyncio.gather(*(provider.acquire_lease(k, "me", 5_000) for k in keys))
        assert all(g.acquired for g in got)
        batches, calls = totals(provider, "acquire")
        assert calls > batches > 0
        await provider.aclose()
    finally:
        await engine.dispose()


@pytest.mark.parametrize("mode", [True, False, "always"])
def test_the_coalescing_mode_is_reported(database_url: str, mode: bool | str) -> None:
    provider = SqlLeaseProvider.from_url(database_url, coalesce=mode)  # type: ignore[arg-type]
    assert provider.coalesce == mode


@pytest.mark.parametrize("bad", ["sometimes", 1, None])
def test_a_bad_coalescing_mode_is_refused(database_url: str, bad: object) -> None:
    with pytest.raises((LeaseValueError, LeaseTypeError)):
        SqlLeaseProvider.from_url(database_url, coalesce=bad)  # type: ignore[arg-type]


async def test_a_call_stuck_on_a_row_lock_does_not_hold_up_its_kind(database_url: str) -> None:
    """A lone renew waits for a row lock that a long transaction holds; renewals of other
    keys that queue behind it go out beside it and finish while it still waits."""
    t = tag()
    locked, free = f"stuck:{t}", [f"beside:{t}:{i}" for i in range(4)]
    dsn = _pg_dsn(database_url)
    async with SqlLeaseProvider.from_url(database_url, timeout=10.0) as provider:
        for key in (locked, *free):
            assert (await provider.acquire_lease(key, "me", 60_000)).acquired
        with psycopg.connect(dsn, autocommit=True) as admin, psycopg.connect(dsn) as blocker:
            blocker.execute("SELECT 1 FROM leases WHERE key = %s FOR UPDATE", (locked.encode(),))
            stuck = asyncio.ensure_future(provider.renew_lease(locked, "me", 60_000))
            await _until_a_statement_waits_for_a_lock(admin)
            beside = await asyncio.gather(*(provider.renew_lease(k, "me", 60_000) for k in free))
            assert beside == [True] * 4
            assert not stuck.done()
            blocker.rollback()
            assert await stuck
