"""A provider used from one ``asyncio.run`` after another (a script, a test suite, a CLI).

Its first call from the second loop used to fail, classed as a database error (the held
connection belonged to the first, closed loop: "attached to a different loop"); the second
call worked. Now the provider starts again with a fresh pool before any I/O.
"""

from __future__ import annotations

import asyncio
import gc
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
