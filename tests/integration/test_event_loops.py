"""A provider used from one ``asyncio.run`` after another (a script, a test suite, a CLI).

Its first call from the second loop used to fail, classed as a database error (the held
connection belonged to the first, closed loop: "attached to a different loop"); the second
call worked. Now the provider starts again with a fresh pool before any I/O.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Callable

import pytest

from sql_lease import SqlLeaseProvider, migrate


# The first loop's sockets are closed by the garbage collector (the loop that owned them is
# gone): Python says so with a ResourceWarning.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_every_call_works_from_a_second_and_third_event_loop(
    make_database: Callable[[], str], tmp_path: object, backend: str
) -> None:
    url = make_database() if backend == "postgresql" else f"sqlite:///{tmp_path}/l.db"
    migrate.upgrade(url)
    provider = SqlLeaseProvider.from_url(url)

    async def first() -> None:
        assert (await provider.acquire_lease("k", "a", 60_000)).acquired
        assert await provider.get_lease_owner("k") == "a"

    async def again() -> None:
        assert await provider.get_lease_owner("k") == "a"  # the first call of this loop
        assert await provider.renew_lease("k", "a", 60_000)
        assert not (await provider.acquire_lease("k", "b", 60_000)).acquired

    asyncio.run(first())
    asyncio.run(again())
    asyncio.run(again())

    async def last() -> None:
        await again()
        await provider.aclose()

    asyncio.run(last())
    gc.collect()


@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_holds_work_from_a_second_loop_and_aclose_from_a_third_sends_nothing_on_the_old_ones(
    make_database: Callable[[], str], caplog: pytest.LogCaptureFixture
) -> None:
    url = make_database()
    migrate.upgrade(url)
    provider = SqlLeaseProvider.from_url(url)

    async def hold(key: str) -> None:
        async with provider.hold(key, "o", 300) as lease:
            await asyncio.sleep(0.5)  # past its TTL: renewed
            assert not lease.lost
        assert await provider.get_lease_owner(key) is None

    async def close() -> None:
        await provider.aclose()

    with caplog.at_level(logging.WARNING):
        asyncio.run(hold("a"))
        asyncio.run(hold("b"))
        asyncio.run(close())  # no call in this loop before it
        gc.collect()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
