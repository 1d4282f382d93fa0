"""The observer API on the in-memory provider: statement events, lease events, failures."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from datetime import timedelta

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

import sql_lease
from sql_lease import (
    NOOP_LEASE_PROVIDER,
    InMemoryLeaseProvider,
    LeaseClosedError,
    LeaseEventKind,
    LeaseLost,
    LeaseObserver,
    LeaseTypeError,
    LeaseValueError,
    SqlLeaseProvider,
    StatementEvent,
)
from sql_lease.observer import observer_of

from .._observers import Broken, Recorder

K = LeaseEventKind


def test_observer_names_are_public_and_importing_sql_lease_does_not_import_opentelemetry() -> None:
    for name in ("LeaseObserver", "StatementEvent", "LeaseEvent", "LeaseEventKind"):
        assert name in sql_lease.__all__ and hasattr(sql_lease, name)
    code = (
        "import sys, sql_lease\n"
        "assert not [m for m in sys.modules if m.startswith(('opentelemetry', 'sql_lease.otel'))]"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_event_kinds_are_the_documented_ones() -> None:
    assert {k.value for k in LeaseEventKind} == {
        "acquired",
        "renewed",
        "renew_failed",
        "lost",
        "released",
        "transferred",
        "waited",
        "woke",
        "granted",
        "refused",
        "acquire_failed",
        "wait_ended",
        "renewed_late",
    }


def test_events_are_frozen() -> None:
    event = StatementEvent("acquire_lease", "memory", 0.1)
    with pytest.raises(AttributeError):
        event.seconds = 2.0  # type: ignore[misc]
    assert (event.error, event.rows) == (None, None)


def test_a_recorder_is_a_lease_observer_and_the_provider_exposes_it() -> None:
    recorder = Recorder()
    assert isinstance(recorder, LeaseObserver)
    provider = InMemoryLeaseProvider(observer=recorder)
    assert provider.observer is recorder
    assert observer_of(provider) is recorder
    assert InMemoryLeaseProvider().observer is None
    assert observer_of(NOOP_LEASE_PROVIDER) is None
    with pytest.raises(AttributeError):
        provider.observer = None  # type: ignore[misc]


def test_an_object_without_the_two_methods_is_refused() -> None:
    with pytest.raises(LeaseTypeError, match="on_statement"):
        InMemoryLeaseProvider(observer=object())  # type: ignore[arg-type]
    engine = create_async_engine("postgresql+asyncpg://u@127.0.0.1:1/db")
    with pytest.raises(LeaseTypeError, match="on_statement"):
        SqlLeaseProvider(engine, observer=object())  # type: ignore[arg-type]
    with pytest.raises(LeaseTypeError, match="on_statement"):
        SqlLeaseProvider.from_url("sqlite:///unused.db", observer=object())  # type: ignore[arg-type]


def test_the_sql_provider_exposes_its_observer_read_only() -> None:
    recorder = Recorder()
    engine = create_async_engine("postgresql+asyncpg://u@127.0.0.1:1/db")
    provider = SqlLeaseProvider(engine, observer=recorder)
    assert provider.observer is recorder and observer_of(provider) is recorder
    assert SqlLeaseProvider(engine).observer is None
    with pytest.raises(AttributeError):
        provider.observer = None  # type: ignore[misc]


async def test_every_operation_reports_one_statement_event() -> None:
    recorder = Recorder()
    p = InMemoryLeaseProvider(observer=recorder)
    assert (await p.acquire_lease("k", "a", 10_000)).acquired
    assert not (await p.acquire_lease("k", "b", 10_000)).acquired
    assert await p.get_lease_owner("k") == "a"
    assert (await p.get_lease("k")) is not None
    assert await p.renew_lease("k", "a", 10_000)
    assert await p.renew_leases([("k", "a"), ("x", "a")], 10_000) == [True, False]
    assert await p.transfer_lease("k", "a", "b", 10_000)
    await p.release_lease("k", "b")
    assert [lease.key for lease in await p.list_leases()] == []
    await p.acquire_lease("k2", "a", timedelta(seconds=10))
    assert await p.force_release("k2")
    assert await p.purge_expired() == 0
    await p.now()
    assert recorder.operations() == [
        "acquire_lease",
        "acquire_lease",
        "get_lease_owner",
        "get_lease",
        "renew_lease",
        "renew_leases",
        "transfer_lease",
        "release_lease",
        "list_leases",
        "acquire_lease",
        "force_release",
        "purge_expired",
        "now",
    ]
    for event in recorder.statements:
        assert event.backend == "memory"
        assert event.error is None and event.rows is None
        assert 0 <= event.seconds < 30


async def test_calls_rejected_before_the_store_are_not_statements() -> None:
    recorder = Recorder()
    p = InMemoryLeaseProvider(observer=recorder)
    with pytest.raises(LeaseValueError):
        await p.acquire_lease("", "a", 1_000)
    with pytest.raises(LeaseTypeError):
        await p.renew_lease("k", "a", 1.5)  # type: ignore[arg-type]
    await p.aclose()
    with pytest.raises(LeaseClosedError):
        await p.get_lease_owner("k")
    assert recorder.statements == []


async def test_a_raising_observer_never_breaks_a_call_and_is_logged_once_at_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = Broken()
    p = InMemoryLeaseProvider(observer=broken)
    with caplog.at_level(logging.DEBUG, logger="sql_lease.observer"):
        assert (await p.acquire_lease("k", "a", 10_000)).acquired
        assert await p.get_lease_owner("k") == "a"
        assert await p.renew_lease("k", "a", 10_000)
        async with p.hold("h", "a", 10_000) as lease:
            assert lease.held
        assert await p.get_lease_owner("h") is None
    assert broken.calls >= 6  # 3 calls, the hold's acquire and release, its events
    records = [r for r in caplog.records if r.name == "sql_lease.observer"]
    assert [r.levelno for r in records].count(logging.WARNING) == 1
    assert records[0].levelno == logging.WARNING and records[0].exc_info is not None
    assert all(r.levelno == logging.DEBUG for r in records[1:])


async def test_hold_reports_acquired_renewed_and_released_in_order() -> None:
    recorder = Recorder()
    p = InMemoryLeaseProvider(observer=recorder)
    async with p.hold("k", "a", 300, renew_every_ms=50) as lease:
        await recorder.when(lambda e: e.kind is K.RENEWED)
        fence = lease.fence
    kinds = recorder.kinds()
    assert kinds[0] is K.ACQUIRED and kinds[-1] is K.RELEASED
    assert set(kinds[1:-1]) == {K.RENEWED}
    assert all((e.key, e.owner, e.fence) == ("k", "a", fence) for e in recorder.events)
    assert recorder.events[-1].detail is None
    assert "renew_leases" in recorder.operations()


async def test_hold_reports_lost_once_and_no_release_after_a_force_release() -> None:
    recorder = Recorder()
    p = InMemoryLeaseProvider(observer=recorder)

    async def body() -> None:
        async with p.hold("k", "a", 300, renew_every_ms=50):
            assert await p.force_release("k")
            await asyncio.Event().wait()  # cancelled when the renewal finds the lease gone

    with pytest.raises(LeaseLost):
        await body()
    kinds = recorder.kinds()
    assert kinds[0] is K.ACQUIRED and kinds[-1] is K.LOST
    assert kinds.count(K.LOST) == 1 and K.RELEASED not in kinds
    assert recorder.events[-1].detail is not None and "gone" in recorder.events[-1].detail


async def test_hold_reports_transferred_with_the_new_owner_and_no_release() -> None:
    recorder = Recorder()
    p = InMemoryLeaseProvider(observer=recorder)
    async with p.hold("k", "a", 10_000) as lease:
        await lease.transfer_to("b")
    assert recorder.kinds() == [K.ACQUIRED, K.TRANSFERRED]
    assert recorder.events[-1].detail == "b"
    assert await p.get_lease_owner("k") == "b"


async def test_a_hold_that_is_not_acquired_reports_no_lease_event() -> None:
    recorder = Recorder()
    p = InMemoryLeaseProvider(observer=recorder)
    await p.acquire_lease("k", "other", 10_000)
    with pytest.raises(sql_lease.LeaseNotAcquired):
        async with p.hold("k", "a", 10_000):
            pass
    assert recorder.events == []


async def test_closing_the_provider_reports_the_held_lease_lost() -> None:
    recorder = Recorder()
    p = InMemoryLeaseProvider(observer=recorder)

    async def body() -> None:
        async with p.hold("k", "a", 10_000):
            await p.aclose()
            await asyncio.Event().wait()

    with pytest.raises(LeaseLost):
        await body()
    assert recorder.kinds() == [K.ACQUIRED, K.LOST]


async def test_a_wait_reports_waited_then_woke_by_the_holders_release() -> None:
    recorder = Recorder()
    p = InMemoryLeaseProvider(observer=recorder)
    first = await p.acquire_lease("k", "holder", 60_000)
    waiting = asyncio.create_task(p.wait_for_lease("k", "me", 10_000, timeout_ms=30_000))
    waited = await recorder.when(lambda e: e.kind is K.WAITED)
    assert (waited.key, waited.owner, waited.fence, waited.detail) == (
        "k",
        "me",
        first.fence,
        "holder",
    )
    await p.release_lease("k", "holder")
    assert (await waiting).acquired
    woke = await recorder.when(lambda e: e.kind is K.WOKE)
    assert (woke.owner, woke.detail) == ("me", "notify")
    assert recorder.kinds() == [K.WAITED, K.WOKE]


async def test_a_wait_that_times_out_wakes_by_its_timer() -> None:
    recorder = Recorder()
    p = InMemoryLeaseProvider(observer=recorder)
    await p.acquire_lease("k", "holder", 60_000)
    result = await p.wait_for_lease("k", "me", 10_000, timeout_ms=50)
    assert not result.acquired
    assert recorder.kinds() == [K.WAITED, K.WOKE]
    assert recorder.events[-1].detail == "timer"


async def test_held_leases_balance_to_zero_over_many_holds() -> None:
    recorder = Recorder()
    p = InMemoryLeaseProvider(observer=recorder)

    async def one(i: int) -> None:
        try:
            async with p.hold(f"k{i}", "a", 300, renew_every_ms=100) as lease:
                if i % 3 == 0:
                    await lease.transfer_to("b")
                elif i % 3 == 1:
                    await p.force_release(f"k{i}")
                    await asyncio.Event().wait()
        except LeaseLost:
            pass

    await asyncio.gather(*(one(i) for i in range(12)))
    kinds = recorder.kinds()
    ended = kinds.count(K.RELEASED) + kinds.count(K.LOST) + kinds.count(K.TRANSFERRED)
    assert kinds.count(K.ACQUIRED) == 12 == ended
    assert (kinds.count(K.TRANSFERRED), kinds.count(K.LOST)) == (4, 4)


# -- contention events (acquire outcomes, waits, hold durations) and lease classes ----------


async def test_acquire_outcomes_are_reported_with_the_holder_and_the_calls_duration() -> None:
    recorder = Recorder()
    p = InMemoryLeaseProvider(observer=recorder)
    won = await p.acquire_lease("k", "a", 10_000)
    await p.acquire_lease("k", "b", 10_000)
    with pytest.raises(LeaseValueError):
        await p.acquire_lease("k", "b", 0)  # bad input: not an outcome
    granted, refused = recorder.contention
    assert (granted.kind, granted.owner, granted.fence) == (K.GRANTED, "a", won.fence)
    assert (refused.kind, refused.owner, refused.detail, refused.fence) == (
        K.REFUSED,
        "b",
        "a",
        won.fence,
    )
    assert all(e.seconds is not None and e.seconds >= 0 for e in recorder.contention)
    await p.aclose()
    with pytest.raises(LeaseClosedError):
        await p.acquire_lease("k", "a", 10_000)
    assert len(recorder.contention) == 2  # a closed provider: refused before any I/O


async def test_an_observed_provider_takes_counting_and_metadata_arguments() -> None:
    recorder = Recorder()
    p = InMemoryLeaseProvider(observer=recorder)
    a = await p.acquire_lease("sem", "a", 10_000, limit=2, metadata="m")
    await p.acquire_lease("sem", "b", 10_000, limit=2)
    refused = await p.acquire_lease("sem", "c", 10_000, limit=2)
    assert a.acquired and not refused.acquired
    async with p.hold("sem", "a", 10_000, limit=2) as held:  # through the observed acquire
        assert held.fence == a.fence
    kinds = [e.kind for e in recorder.contention]
    assert kinds == [K.GRANTED, K.GRANTED, K.REFUSED, K.GRANTED]
    assert (await p.get_lease("sem")).owner == "b"  # the hold released a's slot
    await p.aclose()


async def test_a_wait_reports_its_end_once_with_its_outcome_and_duration() -> None:
    recorder = Recorder()
    p = InMemoryLeaseProvider(observer=recorder)
    await p.acquire_lease("k", "holder", 60_000)
    assert not (await p.wait_for_lease("k", "me", 10_000, timeout_ms=60)).acquired
    [ended] = [e for e in recorder.contention if e.kind is K.WAIT_ENDED]
    assert (ended.owner, ended.detail) == ("me", "timeout")
    assert ended.seconds is not None and ended.seconds >= 0.06


async def test_the_events_that_end_a_hold_carry_how_long_it_was_held() -> None:
    recorder = Recorder()
    p = InMemoryLeaseProvider(observer=recorder)
    async with p.hold("k", "a", 10_000):
        await asyncio.sleep(0.05)
    acquired, released = recorder.events
    assert (acquired.kind, acquired.seconds) == (K.ACQUIRED, None)
    assert released.kind is K.RELEASED
    assert released.seconds is not None and 0.05 <= released.seconds < 5


def test_lease_classes_by_prefix_and_their_cap() -> None:
    from sql_lease.observer import OTHER_CLASS, LeaseClasses, by_prefix

    assert by_prefix(":")("tenant:42:import") == "tenant"
    assert by_prefix(":", 2)("tenant:42:import") == "tenant:42"
    assert by_prefix("/")("plain") == "plain"
    classes = LeaseClasses(by_prefix(":"), cap=2)
    assert [classes(k) for k in ("a:1", "b:1", "c:1", "a:2", "c:2")] == [
        "a",
        "b",
        OTHER_CLASS,
        "a",
        OTHER_CLASS,
    ]
    with pytest.raises(LeaseValueError):
        by_prefix("")
    with pytest.raises(LeaseValueError):
        by_prefix(":", 0)
    with pytest.raises(LeaseValueError):
        LeaseClasses(by_prefix(), cap=0)
    with pytest.raises(LeaseTypeError):
        LeaseClasses("prefix")  # type: ignore[arg-type]
    with pytest.raises(LeaseTypeError):
        LeaseClasses(lambda key: 1)("k")  # type: ignore[arg-type,return-value]
