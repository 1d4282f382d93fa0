"""Sync providers over memory, PostgreSQL and SQLite, on the session's databases."""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
from collections.abc import Callable, Iterator
from multiprocessing.pool import Pool
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from sql_lease import migrate
from sql_lease.sync import InMemoryLeaseProvider, SqlLeaseProvider

from ..infra.pgbouncer import PgBouncer

#: "pgbouncer": PostgreSQL through a real PgBouncer in transaction mode (``pooler=``).
PROVIDERS = ["memory", "postgresql", "sqlite", "pgbouncer", "mariadb"]


@pytest.fixture(scope="session")
def sync_pgbouncer(pg_server: object) -> Iterator[PgBouncer]:
    """Transaction pooling with its defaults and 4 server connections, for the session."""
    with PgBouncer(pool_mode="transaction", pool_size=4) as bouncer:
        yield bouncer


@pytest.fixture(scope="session")
def pooled_database_url(make_database: Callable[[], str]) -> str:
    """A migrated database of its own (the contract cases run on every provider at once)."""
    url = make_database()
    migrate.upgrade(url)
    return url


def pooled_url(request: pytest.FixtureRequest) -> str:
    """`pooled_database_url` through `sync_pgbouncer`."""
    bouncer: PgBouncer = request.getfixturevalue("sync_pgbouncer")
    database_url: str = request.getfixturevalue("pooled_database_url")
    return bouncer.url(make_url(database_url).database or "postgres")


def _sync_provider(request: pytest.FixtureRequest, backend: str) -> Any:
    if backend == "memory":
        return InMemoryLeaseProvider()
    if backend == "pgbouncer":
        provider = SqlLeaseProvider.from_url(pooled_url(request), timeout=10, pooler="transaction")
        provider.executor.run("setup", True, "TRUNCATE leases", (), 10)
        return provider
    url: str = request.getfixturevalue(
        {"postgresql": "database_url", "sqlite": "sqlite_url", "mariadb": "mariadb_url"}[backend]
    )
    provider = SqlLeaseProvider.from_url(url, timeout=10)
    provider.executor.run(
        "setup",
        True,
        "DELETE FROM leases" if backend in ("sqlite", "mariadb") else "TRUNCATE leases",
        (),
        10,
    )
    return provider


@pytest.fixture(params=PROVIDERS)
def sync_provider(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A sync provider with an empty leases table; closed afterwards."""
    provider = _sync_provider(request, request.param)
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


@pytest.fixture
def every_sync_provider(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """One sync provider per backend (memory, postgresql, sqlite), each on an empty table."""
    providers: dict[str, Any] = {}
    try:
        for backend in PROVIDERS:
            providers[backend] = _sync_provider(request, backend)
        yield providers
    finally:
        for p in providers.values():
            p.close()


def forkserver() -> multiprocessing.context.ForkServerContext:
    """Processes forked from a server that imported the worker modules once (see worker_pool)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["tests.sync._workers", "tests.sync._history_workers"])
    return ctx


@pytest.fixture(scope="session")
def worker_pool() -> Iterator[Pool]:
    """Eight worker processes, shared by the race, linearizability and tick tests.

    A process that imports the library costs about a second of CPU: the workers are forked
    from a fork server that imported the worker modules once (no threads, no connections: a
    clean fork). A `multiprocessing.Pool` starts all eight at once, so eight blocking tasks
    always run in eight different processes (the tick test relies on that).
    """
    pool = forkserver().Pool(8)
    try:
        yield pool
    except BaseException:
        pool.terminate()
        raise
    else:
        pool.close()  # every task has returned (each test waits for its own): workers exit
    finally:
        pool.join()
