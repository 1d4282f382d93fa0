"""SQLite on aiosqlite (and, for `sql_lease.sync`, the stdlib sqlite3): the only place they are
imported.

- `catalogue`: the statements and the DDL of the fence counter, plain data;
- `startup`: the start-up rule of a connection (pragmas, WAL) in async and sync form, and
  opening only files that exist;
- `driver`: aiosqlite's per-connection fetch and ``from_url``'s engine defaults;
- `errors`: the one classifier and translation;
- `sync`: the sqlite3 executor of the sync provider.

No wake-up source: waiters poll.
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.pool import Pool, PoolProxiedConnection

from ..._dberrors import Failure
from ...capabilities import WakeupSink, WakeupSource
from ...catalogue import Catalogue
from ...errors import LeaseDatabaseError, LeaseValueError
from .. import Adaptor
from . import driver, errors, startup
from .catalogue import build_catalogue

__all__ = ["BACKEND", "SqliteBackend"]


class SqliteBackend:
    """The SQLite `sql_lease.backends.Backend`."""

    name: Final = "sqlite"
    async_driver: Final = "sqlite+aiosqlite"
    has_schemas: Final = False
    title: Final = "SQLite"

    def catalogue(self, table_name: str, schema: str | None) -> Catalogue:
        return build_catalogue(table_name)

    def classify(self, exc: BaseException) -> Failure:
        return errors.classify(exc)

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
        return errors.translate(
            exc, operation=operation, where=where, sent=sent, table=table, timed_out=timed_out
        )

    def adaptor(self, timeout: float, synchronous_commit: bool) -> Adaptor:
        return driver.adaptor(timeout, synchronous_commit)

    async def settle(self, fairy: PoolProxiedConnection) -> None:
        pass  # an interrupted SQLite statement is rolled back with its connection

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
        if pooler is not None:
            raise LeaseValueError("SQLite has no connection pooler: leave pooler=None")
        driver.engine_arguments(
            connect_args,
            engine_kwargs,
            timeout=timeout,
            connect_timeout=connect_timeout,
            synchronous_commit=synchronous_commit,
        )

    def watch_engine(self, engine: AsyncEngine, *, timeout: float, pooler: str | None) -> None:
        return None

    def wakeup_source(
        self, pool: Pool, channel: str, timeout: float, sink: WakeupSink
    ) -> WakeupSource | None:
        return None

    def migration_connect_args(
        self, *, timeout: float | None, connect_timeout: float, busy_seconds: float, create: bool
    ) -> dict[str, Any]:
        # Driver-level autocommit: the migration's transaction is the one it begins itself.
        args: dict[str, Any] = {"isolation_level": None, "timeout": busy_seconds}
        if not create:
            args["async_creator_fn"] = startup.open_existing
        return args

    async def begin_migration(self, conn: AsyncConnection, *, prepare: bool, busy: float) -> None:
        if prepare:  # the upgrade puts the file in WAL mode, once, for every later connection
            raw = await conn.get_raw_connection()
            await startup.ensure_wal(raw.driver_connection, busy)
        await conn.exec_driver_sql("BEGIN IMMEDIATE")


BACKEND: Final = SqliteBackend()
