"""Shared fixtures: a fresh, migrated PostgreSQL database per test session (pytest-postgresql).

The server comes from ``SQL_LEASE_TEST_DSN`` (default ``postgresql://postgres@127.0.0.1:5432/
postgres``). When it cannot be reached the run fails loudly: no PostgreSQL test is ever skipped.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pytest_postgresql.janitor import DatabaseJanitor
from sqlalchemy.engine import URL, make_url

from sql_lease import SqlLeaseProvider, migrate

from . import _mariadb
from ._citus import citus_workers, drop_on_workers, make_citus

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


def server_url() -> URL:
    return make_url(os.environ.get("SQL_LEASE_TEST_DSN", DEFAULT_DSN))


def _janitor(dbname: str) -> DatabaseJanitor:
    url = server_url()
    return DatabaseJanitor(
        user=url.username or "postgres",
        host=url.host or "127.0.0.1",
        port=url.port or 5432,
        dbname=dbname,
        password=url.password,
        maintenance_dbname=url.database or "postgres",
        connection_timeout=10,
    )


@pytest.fixture(scope="session")
def pg_server() -> URL:
    """The PostgreSQL server under test; fails the session if it is unreachable."""
    url = server_url()
    try:
        with psycopg.connect(
            host=url.host,
            port=url.port,
            user=url.username,
            password=url.password,
            dbname=url.database or "postgres",
            connect_timeout=5,
        ):
            pass
    except psycopg.Error as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {url.render_as_string(hide_password=True)} ({exc}). "
            "Start it (`docker compose up -d`) or set SQL_LEASE_TEST_DSN.",
            pytrace=False,
        )
    return url


#: The databases `make_database` made, dropped by `pytest_sessionfinish`.
_MADE: list[DatabaseJanitor] = []


@pytest.fixture(scope="session")
def make_database(pg_server: URL) -> Callable[[], str]:
    """Factory for extra empty databases, all dropped when the session finishes."""

    def make() -> str:
        name = f"sql_lease_test_{uuid.uuid4().hex[:12]}"
        janitor = _janitor(name)
        janitor.init()
        _MADE.append(janitor)
        if citus_workers():  # the on-demand scale-out suite: a Citus database (tests/_citus)
            make_citus(pg_server, name)
        return pg_server.set(database=name).render_as_string(hide_password=False)

    return make


def _checked_directories(session: pytest.Session) -> tuple[Path, ...]:
    return tuple({Path.cwd().resolve(), Path(session.config.rootpath).resolve()})


_STRAY_BEFORE: set[Path] = set()


def pytest_sessionstart(session: pytest.Session) -> None:
    _STRAY_BEFORE.update(_mariadb.stray_files(*_checked_directories(session)))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Drop the databases of `make_database`, then fail a session that left files named like a
    MariaDB test database behind (`_mariadb.stray_files`). Here, not in the fixture's teardown:
    each ``DROP DATABASE`` waits for a checkpoint, and the hundreds a whole run makes took
    longer on a loaded machine than the per-test timeout, which counts a session fixture's
    teardown against the last test."""
    while _MADE:
        janitor = _MADE.pop()
        if citus_workers():
            drop_on_workers(server_url(), janitor.dbname)
            with psycopg.connect(
                server_url().set(database="postgres").render_as_string(hide_password=False),
                autocommit=True,
            ) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{janitor.dbname}" WITH (FORCE)')
            continue
        janitor.drop()
    _mariadb.drop_made()
    stray = _mariadb.stray_files(*_checked_directories(session)) - _STRAY_BEFORE
    if stray:
        names = ", ".join(sorted(str(path) for path in stray))
        print(f"\nERROR: this test session created files named like test databases: {names}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def database_url(make_database: Callable[[], str]) -> str:
    """A fresh database for this session with the leases migrations applied."""
    url = make_database()
    migrate.upgrade(url)
    return url


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A migrated SQLite database file for this session (the embedded backend)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'leases.db'}"
    migrate.upgrade(url)
    return url


async def emptied_provider(url: str, **kwargs: Any) -> AsyncIterator[SqlLeaseProvider]:
    """A provider on ``url`` (``from_url(url, timeout=10, **kwargs)``) whose leases table is
    emptied first; closed afterwards. The body of the provider fixtures."""
    provider = SqlLeaseProvider.from_url(url, timeout=10, **kwargs)
    empty = "DELETE FROM leases" if url.startswith(("sqlite", "mariadb")) else "TRUNCATE leases"
    async with provider.engine.connect() as conn:
        await conn.exec_driver_sql(empty)
        await conn.commit()
    yield provider
    await provider.aclose()


@pytest.fixture
async def sqlite_provider(sqlite_url: str) -> AsyncIterator[SqlLeaseProvider]:
    """A provider on the session's SQLite file, with the leases table emptied first."""
    async for provider in emptied_provider(sqlite_url):
        yield provider


@pytest.fixture
async def sql_provider(database_url: str) -> AsyncIterator[SqlLeaseProvider]:
    """A provider on the session database, with the leases table emptied first."""
    async for provider in emptied_provider(database_url):
        yield provider


@pytest.fixture
async def batched_sql_provider(database_url: str) -> AsyncIterator[SqlLeaseProvider]:
    """As `sql_provider`, with every call sent through a coalesced batch (``"always"``)."""
    async for provider in emptied_provider(database_url, coalesce="always"):
        yield provider


@pytest.fixture
async def batched_sqlite_provider(sqlite_url: str) -> AsyncIterator[SqlLeaseProvider]:
    """As `sqlite_provider`, with every call sent through a coalesced batch (``"always"``)."""
    async for provider in emptied_provider(sqlite_url, coalesce="always"):
        yield provider


@pytest.fixture(scope="session")
def mariadb_server() -> URL:
    """The MariaDB server under test (`tests._mariadb`): fails under CI=true when unreachable."""
    return _mariadb.require_server()


@pytest.fixture
def make_mariadb_database(mariadb_server: URL) -> Callable[[], str]:
    """Factory for empty MariaDB databases (``sql_lease_t_<random>``), dropped at the end."""
    return lambda: _mariadb.make_database(mariadb_server)


@pytest.fixture(scope="session")
def mariadb_url(mariadb_server: URL) -> str:
    """A migrated MariaDB database for this session."""
    url = _mariadb.make_database(mariadb_server)
    migrate.upgrade(url)
    return url


@pytest.fixture
async def mariadb_provider(mariadb_url: str) -> AsyncIterator[SqlLeaseProvider]:
    """A provider on the session's MariaDB database, with the leases table emptied first."""
    async for provider in emptied_provider(mariadb_url):
        yield provider


@pytest.fixture
async def batched_mariadb_provider(mariadb_url: str) -> AsyncIterator[SqlLeaseProvider]:
    """As `mariadb_provider`, with every call sent through a coalesced batch (``"always"``)."""
    async for provider in emptied_provider(mariadb_url, coalesce="always"):
        yield provider
