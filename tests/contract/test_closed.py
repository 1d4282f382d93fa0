"""A closed provider: every call raises `LeaseClosedError` before any I/O; nothing leaks."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from sql_lease import (
    AcquireResult,
    InMemoryLeaseProvider,
    LeaseClosedError,
    LeaseError,
    LeaseLost,
    SqlLeaseProvider,
)
from sql_lease._holding.wait import hub_for

LONG = 30_000

CALLS: dict[str, Callable[[Any], Awaitable[object]]] = {
    "acquire_lease": lambda p: p.acquire_lease("k", "o", LONG),
    "get_lease_owner": lambda p: p.get_lease_owner("k"),
    "release_lease": lambda p: p.release_lease("k", "o"),
    "renew_lease": lambda p: p.renew_lease("k", "o", LONG),
    "transfer_lease": lambda p: p.transfer_lease("k", "o", "p", LONG),
    "get_lease": lambda p: p.get_lease("k"),
    "renew_leases": lambda p: p.renew_leases([("k", "o")], LONG),
    "renew_leases-empty": lambda p: p.renew_leases([], LONG),
    "list_leases": lambda p: p.list_leases(),
    "force_release": lambda p: p.force_release("k"),
    "purge_expired": lambda p: p.purge_expired(),
    "now": lambda p: p.now(),
    "wait_for_lease": lambda p: p.wait_for_lease("k", "o", LONG, timeout_ms=LONG),
}


@pytest.mark.parametrize("call", list(CALLS))
async def test_every_call_on_a_closed_provider_raises_closed(provider: Any, call: str) -> None:
    await provider.acquire_lease("k", "o", LONG)
    assert not provider.closed
    await provider.aclose()
    assert provider.closed
    with pytest.raises(LeaseClosedError, match="provider is closed") as info:
        await CALLS[call](provider)
    assert isinstance(info.value, LeaseError) and isinstance(info.value, RuntimeError)


async def test_hold_on_a_closed_provider_raises_at_once(provider: Any) -> None:
    await provider.aclose()
    with pytest.raises(LeaseClosedError, match="hold: provider is closed"):
        provider.hold("k", "o", LONG)


async def test_aclose_is_idempotent_and_async_with_closes(provider: Any) -> None:
    async with provider as same:
        assert same is provider
        await provider.acquire_lease("k", "o", LONG)
    assert provider.closed
    await provider.aclose()
    await asyncio.gather(provider.aclose(), provider.aclose())
    with pytest.raises(LeaseClosedError):
        await provider.get_lease_owner("k")


async def test_a_hold_open_at_close_is_lost_and_left_to_expire(provider: Any) -> None:
    entered = asyncio.Event()

    async def body() -> None:
        async with provider.hold("k", "o", LONG):
            entered.set()
            await asyncio.Event().wait()  # until cancelled by the close

    task = asyncio.create_task(body())
    await entered.wait()
    await provider.aclose()
    with pytest.raises(LeaseLost, match="its provider was closed"):
        await asyncio.wait_for(task, 30)
    if isinstance(provider, SqlLeaseProvider):  # not released: the body may still have run
        # A provider on the same engine: its connect settings (a pooler's too) apply.
        async with SqlLeaseProvider(provider.engine) as other:
            assert await other.get_lease_owner("k") == "o"
        await provider.engine.dispose()


async def test_a_waiter_fails_at_once_when_its_provider_closes(provider: Any) -> None:
    await provider.acquire_lease("k", "holder", LONG)
    waiter = asyncio.create_task(provider.wait_for_lease("k", "o", LONG, timeout_ms=LONG))
    hub = hub_for(provider)
    # Until the waiter is in line and, on PostgreSQL, its listener is up (a close while the
    # listener is still connecting is a case of its own).
    while not (hub.active and (hub.listener is None or hub.listener.connected)):
        await asyncio.sleep(0.001)
        assert not waiter.done(), waiter
    await provider.aclose()
    with pytest.raises(LeaseClosedError):
        await asyncio.wait_for(waiter, 30)


async def test_closed_is_checked_before_any_io() -> None:
    unreachable = SqlLeaseProvider.from_url(
        "postgresql://u:pw@127.0.0.1:1/none", timeout=1, connect_timeout=1
    )
    await unreachable.aclose()
    for call in CALLS.values():
        with pytest.raises(LeaseClosedError):  # not a connection error: nothing was tried
            await call(unreachable)


async def test_the_in_memory_provider_closes_too() -> None:
    async with InMemoryLeaseProvider() as provider:
        await provider.acquire_lease("k", "o", LONG)
    with pytest.raises(LeaseClosedError, match="acquire_lease"):
        await provider.acquire_lease("k", "o", LONG)


@pytest.fixture(params=["postgresql", "sqlite", "mariadb"])
def url(request: pytest.FixtureRequest) -> str:
    name = {"postgresql": "database_url", "sqlite": "sqlite_url", "mariadb": "mariadb_url"}[
        request.param
    ]
    value: str = request.getfixturevalue(name)
    return value


def _engine_for(url: str) -> Any:
    """The caller's own engine, as an application would create it."""
    if url.startswith("sqlite:"):
        driver_url = url.replace("sqlite:", "sqlite+aiosqlite:", 1)
        return create_async_engine(driver_url, connect_args={"isolation_level": None})
    if url.startswith("mariadb:"):
        return create_async_engine(url.replace("mariadb:", "mariadb+asyncmy:", 1))
    return create_async_engine(url.replace("postgresql:", "postgresql+asyncpg:", 1))


async def test_closing_leaves_a_callers_engine_open_with_nothing_checked_out(url: str) -> None:
    engine = _engine_for(url)
    try:
        provider = SqlLeaseProvider(engine)
        calls = [provider.acquire_lease(f"engine-{i}", "o", LONG) for i in range(8)]
        await asyncio.gather(*calls)
        await provider.aclose()
        with pytest.raises(LeaseClosedError):
            await provider.get_lease_owner("engine-0")
        assert engine.sync_engine.pool.checkedout() == 0
        async with engine.connect() as conn:  # not disposed: still usable
            assert (await conn.exec_driver_sql("SELECT 1")).scalar() == 1
        await SqlLeaseProvider(engine).release_lease("engine-0", "o")
    finally:
        await engine.dispose()


async def test_calls_in_flight_finish_before_the_connections_go_back(url: str) -> None:
    engine = _engine_for(url)
    try:
        provider = SqlLeaseProvider(engine)
        tasks = [
            asyncio.create_task(provider.acquire_lease(f"flight-{i}", "o", LONG)) for i in range(8)
        ]
        await asyncio.sleep(0)  # every call has started and waits on the database
        await provider.aclose()
        assert engine.sync_engine.pool.checkedout() == 0
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            assert isinstance(outcome, AcquireResult | LeaseClosedError), outcome
    finally:
        await engine.dispose()


SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from sql_lease import LeaseClosedError, SqlLeaseProvider

    async def main():
        async with SqlLeaseProvider.from_url(sys.argv[1]) as leases:
            await leases.acquire_lease("exit-check", "o", 30_000)
            busy = [asyncio.create_task(leases.get_lease_owner("exit-check")) for _ in range(4)]
            await asyncio.sleep(0)
        await asyncio.gather(*busy, return_exceptions=True)
        for _ in range(3):
            try:
                await leases.acquire_lease("exit-check", "o", 30_000)
            except LeaseClosedError:
                pass
            else:
                sys.exit("a closed provider made a call")
        print("closed")

    asyncio.run(main())
    """
)


def test_closing_leaves_no_warning_at_interpreter_exit(url: str) -> None:
    # Development mode shows ResourceWarnings; -W error turns every warning into a failure.
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", "-c", SCRIPT, url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "closed"
    assert "Warning" not in done.stderr and "non-checked-in" not in done.stderr, done.stderr
