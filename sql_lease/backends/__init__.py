"""The backend seam: what the SQL provider needs from a database, one package per database.

A `Backend` owns everything that differs between databases: the statement catalogue, the
driver adaptor (a bound ``fetch`` per pooled connection), its one error classifier and
translation, the engine defaults of ``from_url``, and its wake-up source (PostgreSQL's
LISTEN/NOTIFY; none for SQLite, whose waiters poll). `backend_for` picks one from an engine's
dialect. This module imports no driver: each backend package imports its own, and only it.

Adding a database: a new package here implementing `Backend`, a line in `_BACKENDS`, a
migration branch for its DDL, and a test fixture line (see ARCHITECTURE.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.pool import Pool, PoolProxiedConnection

from .._dberrors import Failure
from ..capabilities import WakeupSink, WakeupSource
from ..catalogue import Catalogue
from ..errors import LeaseDatabaseError, LeaseValueError

__all__ = ["Adaptor", "Backend", "Fetch", "backend_for", "backend_for_url", "backend_named"]

#: ``await fetch(sql, *args)`` -> the rows: the driver's own call, bound to one connection.
Fetch = Callable[..., Awaitable[list[Any]]]
#: Turns a pooled connection into its `Fetch` (once, when the connection is checked out).
Adaptor = Callable[[PoolProxiedConnection], Fetch]


class Backend(Protocol):
    """One database behind the SQL provider (see the module docstring)."""

    #: The database's name as observers report it (``db.system.name``): postgresql, sqlite.
    name: str
    #: The SQLAlchemy async dialect+driver the async provider runs on.
    async_driver: str
    #: The database's name in messages: PostgreSQL, SQLite.
    title: str
    #: Whether tables live in schemas (``schema=`` is refused when not).
    has_schemas: bool

    def catalogue(self, table_name: str, schema: str | None) -> Catalogue:
        """Every statement for ``table_name`` (already validated), built once."""
        ...

    def classify(self, exc: BaseException) -> Failure:
        """The one classifier: what a driver, pool or SQLAlchemy exception means."""
        ...

    def translate(
        self,
        exc: BaseException,
        *,
        operation: str,
        where: str,
        sent: bool,
        table: str,
        timed_out: bool = False,
    ) -> LeaseDatabaseError:
        """``exc`` as a typed `LeaseError` (the caller chains it)."""
        ...

    def adaptor(self, timeout: float, synchronous_commit: bool) -> Adaptor:
        """The per-connection setup for statements bounded by ``timeout`` seconds."""
        ...

    async def settle(self, fairy: PoolProxiedConnection) -> None:
        """After a statement was cancelled mid-flight: wait (bounded) until the cancellation
        has reached the server, so the statement cannot apply later. The caller drops it."""
        ...

    def engine_arguments(
        self,
        connect_args: dict[str, Any],
        engine_kwargs: dict[str, Any],
        *,
        timeout: float,
        connect_timeout: float,
        synchronous_commit: bool,
        pooler: str | None = None,
    ) -> None:
        """Fill in ``from_url``'s defaults (the caller's own entries win), in place;
        ``pooler`` (``"transaction"``, ``"session"``): the URL reaches a connection pooler
        (`LeaseValueError` when the backend has none)."""
        ...

    def watch_engine(self, engine: AsyncEngine, *, timeout: float, pooler: str | None) -> None:
        """After ``from_url`` built ``engine``: register the backend's one-off checks on it."""
        ...

    def wakeup_source(
        self, pool: Pool, channel: str, timeout: float, sink: WakeupSink
    ) -> WakeupSource | None:
        """A notification channel feeding ``sink``, or None when the database has none."""
        ...

    def migration_connect_args(
        self, *, timeout: float | None, connect_timeout: float, busy_seconds: float, create: bool
    ) -> dict[str, Any]:
        """``connect_args`` of a migration's own engine (``create``: it may create the
        database, as an upgrade of a SQLite file does)."""
        ...

    async def begin_migration(self, conn: AsyncConnection, *, prepare: bool, busy: float) -> None:
        """Set a migration connection up (``prepare``: for an upgrade) and begin its write
        transaction."""
        ...


_BACKENDS: Final = {
    ("postgresql", "asyncpg"): "postgres",
    ("sqlite", "aiosqlite"): "sqlite",
}


def backend_named(package: str) -> Backend:
    """The backend of ``sql_lease.backends.<package>`` (imported on first use)."""
    module = importlib.import_module(f"{__name__}.{package}")
    backend: Backend = module.BACKEND
    return backend


def backend_for(engine: AsyncEngine) -> Backend:
    """The backend for ``engine``'s dialect; `LeaseValueError` for an unsupported one."""
    dialect = engine.dialect
    package = _BACKENDS.get((dialect.name, dialect.driver))
    if package is None:
        raise LeaseValueError(
            "SqlLeaseProvider needs a postgresql+asyncpg or sqlite+aiosqlite engine, not "
            f"{dialect.name}+{dialect.driver}"
        )
    return backend_named(package)


def backend_for_url(url: URL) -> Backend:
    """The backend for a `normalize_url` URL (``postgresql+asyncpg`` or ``sqlite+aiosqlite``)."""
    name, _, driver = url.drivername.partition("+")
    package = _BACKENDS.get((name, driver))
    if package is None:
        raise LeaseValueError(f"unsupported database URL scheme {url.drivername!r}")
    return backend_named(package)
