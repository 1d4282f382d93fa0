"""The observer on real databases: one event per statement, errors, and held-lease events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from sql_lease import (
    LeaseEventKind,
    LeaseLost,
    LeaseSchemaError,
    LeaseTimeoutError,
    SqlLeaseProvider,
)

from .._observers import Broken, Recorder
from ._observed import key, row_locked

K = LeaseEventKind
LONG = 60_000


@pytest.fixture(params=["postgresql", "sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(backend: str, request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("database_url" if backend == "postgresql" else "sqlite_url"))


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
async def provider(url: str, recorder: Recorder) -> AsyncIterator[SqlLeaseProvider]:
    p = SqlLeaseProvider.from_url(url, timeout=10, observer=recorder)
    yield p
    await p.aclose()


async def test_each_statement_reports_its_operation_backend_and_rows(
    provider: SqlLeaseProvider, recorder: Recorder, backend: str
) -> None:
    k, gone = key(), key()
    assert provider.observer is recorder
    assert (await provider.acquire_lease(k, "a", LONG)).acquired
    assert await provider.get_lease_owner(k) == "a"
    assert await provider.get_lease_owner(gone) is None
    assert (await provider.get_lease(k)) is not None
    assert await provider.renew_lease(k, "a", LONG)
    assert not await provider.renew_lease(gone, "a", LONG)
    assert await provider.renew_leases([(k, "a"), (gone, "a")], LONG) == [True, False]
    assert await provider.transfer_lease(k, "a", "b", LONG)
    assert [lease.key for lease in await provider.list_leases(k)] == [k]
    await provider.release_lease(k, "b")
    await provider.acquire_lease(k, "c", LONG)
    assert await provider.force_release(k)
    await provider.purge_expired(min_age_ms=LONG)
    await provider.now()
    got = [(e.operation, e.rows) for e in recorder.statements]
    # A renewal that missed asks once more whether the owner holds a grant of a counting
    # lease (docs/explanation/counting-leases.md): one more statement, on the miss path only.
    assert got[:13] == [
        ("acquire_lease", 1),
        ("get_lease_owner", 1),
        ("get_lease_owner", 0),
        ("get_lease", 1),
        ("renew_lease", 1),
        ("renew_lease", 0),
        ("renew_lease", 0),
        ("renew_leases", 1),
        ("renew_lease", 0),
        ("transfer_lease", 1),
        ("list_leases", 1),
        ("release_lease", 1),
        ("acquire_lease", 1),
    ]
    assert [op for op, _ in got[13:]] == ["force_release", "purge_expired", "now"]
    for event in recorder.statements:
        assert event.backend == backend
        assert event.error is None
        assert 0 < event.seconds < 10


async def test_a_statement_stuck_behind_another_connections_lock_reports_the_timeout(
    url: str, backend: str, recorder: Recorder
) -> None:
    k = key()
    provider = SqlLeaseProvider.from_url(url, timeout=0.5, observer=recorder)
    try:
        await provider.acquire_lease(k, "a", LONG)
        with row_locked(url, backend, k), pytest.raises(LeaseTimeoutError) as info:
            await provider.renew_lease(k, "a", LONG)
        assert await provider.renew_lease(k, "a", LONG)
    finally:
        await provider.aclose()
    failed = recorder.statements[-2]
    assert (failed.operation, failed.backend, failed.rows) == ("renew_lease", backend, None)
    assert failed.error is info.value
    assert 0.1 < failed.seconds < 5
    assert recorder.statements[-1].error is None


async def test_a_missing_table_reports_the_schema_error(url: str, backend: str) -> None:
    recorder = Recorder()
    provider = SqlLeaseProvider.from_url(url, table_name="no_such_leases", observer=recorder)
    try:
        with pytest.raises(LeaseSchemaError) as info:
            await provider.acquire_lease("k", "a", LONG)
    finally:
        await provider.aclose()
    [event] = recorder.statements
    assert (event.operation, event.backend, event.error) == ("acquire_lease", backend, info.value)


async def test_a_raising_observer_does_not_break_statements_or_holds(url: str) -> None:
    broken = Broken()
    provider = SqlLeaseProvider.from_url(url, timeout=10, observer=broken)
    k = key()
    try:
        assert (await provider.acquire_lease(k, "a", LONG)).acquired
        async with provider.hold(key(), "a", LONG) as lease:
            assert lease.held
        assert await provider.transfer_lease(k, "a", "b", LONG)
        assert await provider.get_lease_owner(k) == "b"
    finally:
        await provider.aclose()
    assert broken.calls >= 6


async def test_hold_reports_acquired_renewed_and_released(
    provider: SqlLeaseProvider, recorder: Recorder
) -> None:
    k = key()
    async with provider.hold(k, "a", 3_000, renew_every_ms=100) as lease:
        await recorder.when(lambda e: e.kind is K.RENEWED)
        fence = lease.fence
    kinds = recorder.kinds()
    assert kinds[0] is K.ACQUIRED and kinds[-1] is K.RELEASED
    assert set(kinds[1:-1]) == {K.RENEWED}
    assert all((e.key, e.owner, e.fence) == (k, "a", fence) for e in recorder.events)
    assert fence is not None
    assert "renew_leases" in recorder.operations()
    assert await provider.get_lease_owner(k) is None


async def test_hold_reports_lost_after_a_force_release(
    provider: SqlLeaseProvider, recorder: Recorder, url: str
) -> None:
    k = key()
    other = SqlLeaseProvider.from_url(url, timeout=10)

    async def body() -> None:
        async with provider.hold(k, "a", 3_000, renew_every_ms=100):
            assert await other.force_release(k)
            await asyncio.Event().wait()  # cancelled once the renewal finds it gone

    try:
        with pytest.raises(LeaseLost):
            await body()
    finally:
        await other.aclose()
    kinds = recorder.kinds()
    assert kinds[0] is K.ACQUIRED and kinds[-1] is K.LOST
    assert kinds.count(K.LOST) == 1 and K.RELEASED not in kinds


async def test_hold_reports_transferred_to_the_new_owner(
    provider: SqlLeaseProvider, recorder: Recorder
) -> None:
    k = key()
    async with provider.hold(k, "a", LONG) as lease:
        await lease.transfer_to("b")
    assert recorder.kinds() == [K.ACQUIRED, K.TRANSFERRED]
    assert recorder.events[-1].detail == "b"
    assert await provider.get_lease_owner(k) == "b"


async def test_a_renewal_behind_a_lock_reports_renew_failed_then_renewed(
    url: str, backend: str, recorder: Recorder
) -> None:
    k = key()
    provider = SqlLeaseProvider.from_url(url, timeout=0.3, observer=recorder)
    try:
        async with provider.hold(k, "a", 20_000, renew_every_ms=100) as lease:
            with row_locked(url, backend, k):
                failed = await recorder.when(lambda e: e.kind is K.RENEW_FAILED)
            recorder.events.clear()
            await recorder.when(lambda e: e.kind is K.RENEWED)
            assert lease.held
    finally:
        await provider.aclose()
    assert failed.detail is not None and failed.key == k
    errors = [e for e in recorder.statements if e.error is not None]
    assert errors and all(e.operation == "renew_leases" for e in errors)
    assert all(isinstance(e.error, LeaseTimeoutError) for e in errors)


async def test_a_wait_reports_waited_then_woke_when_the_holder_releases(
    provider: SqlLeaseProvider, recorder: Recorder, backend: str
) -> None:
    k = key()
    first = await provider.acquire_lease(k, "holder", LONG)
    waiting = asyncio.create_task(provider.wait_for_lease(k, "me", LONG, timeout_ms=30_000))
    waited = await recorder.when(lambda e: e.kind is K.WAITED)
    assert (waited.owner, waited.fence, waited.detail) == ("me", first.fence, "holder")
    await provider.release_lease(k, "holder")
    assert (await waiting).acquired
    woke = await recorder.when(lambda e: e.kind is K.WOKE and e.owner == "me")
    # PostgreSQL wakes the waiter by NOTIFY; SQLite re-checks on a timer (or the holder's
    # release through hold() in this process).
    assert woke.detail in ({"notify", "timer"} if backend == "postgresql" else {"timer"})
    if backend == "postgresql":
        assert "want" in recorder.operations()
