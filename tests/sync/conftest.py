"""Sync providers over memory, PostgreSQL and SQLite, on the session's databases."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator
from typing import Any

import pytest

from sql_lease.sync import InMemoryLeaseProvider, SqlLeaseProvider

PROVIDERS = ["memory", "postgresql", "sqlite"]


def _sync_provider(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        return InMemoryLeaseProvider()
    url: str = request.getfixturevalue(
        {"postgresql": "database_url", "sqlite": "sqlite_url"}[request.param]
    )
    provider = SqlLeaseProvider.from_url(url, timeout=10)
    provider.executor.run(
        "setup",
        True,
        "DELETE FROM leases" if request.param == "sqlite" else "TRUNCATE leases",
        (),
        10,
    )
    return provider


@pytest.fixture(params=PROVIDERS)
def sync_provider(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A sync provider with an empty leases table; closed afterwards."""
    provider = _sync_provider(request)
    yield provider
    provider.close()


class AsyncView:
    """The sync provider seen through coroutines that run each call in a worker thread.

    Lets the async contract suite (tests/contract) run its very cases on the sync providers,
    with real threads: concurrent calls of one test run in parallel threads.
    """

    def __init__(self, sync: Any) -> None:
        self._sync = sync

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._sync, name)
        if not callable(value):
            return value

        @functools.wraps(value)
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(value, *args, **kwargs)

        return call

    def __repr__(self) -> str:
        return f"AsyncView({self._sync!r})"


@pytest.fixture
def provider(sync_provider: Any) -> AsyncView:
    """For the async contract cases imported from tests/contract."""
    return AsyncView(sync_provider)
