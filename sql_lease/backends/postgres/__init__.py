"""PostgreSQL on asyncpg (and, for `sql_lease.sync`, psycopg 3): the only place they are imported.

- `catalogue`: the statements (guard included), plain data;
- `driver`: asyncpg's per-connection fetch, cancel-then-drop, ``from_url`` engine defaults;
- `errors`: the one classifier and translation (asyncpg, psycopg, SQLAlchemy);
- `listen`: the LISTEN connection (the wake-up source of waiters);
- `sync`, `sync_listen`: psycopg's executor and LISTEN thread for the sync provider.
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.pool import Pool, PoolProxiedConnection

from ..._dberrors import Failure
from ...capabilities import WakeupSink, WakeupSource
from ...catalogue import Catalogue
from ...errors import LeaseDatabaseError
from .. import Adaptor
from . import driver, errors
from .catalogue import build_catalogue
from .listen import Listener

__all__ = ["BACKEND", "PostgresBackend"]


class PostgresBackend:
    """The PostgreSQL `sql_lease.backends.Backend`."""

    name: Final = "postgresql"
    async_driver: Final = "postgresql+asyncpg"
    has_schemas: Final = True
    title: Final = "PostgreSQL"

    def catalogue(self, table_name: str, schema: str | None) -> Catalogue:
        return build_catalogue(table_name, schema)

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
        # Timeouts and durability are server settings of the connection (engine_arguments).
        return driver.fetch_of

    async def settle(self, fairy: PoolProxiedConnection) -> None:
        await driver.settle(fairy)

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
        driver.engine_arguments(
            connect_args,
            engine_kwargs,
            timeout=timeout,
            connect_timeout=connect_timeout,
            synchronous_commit=synchronous_commit,
            pooler=pooler,
        )

    def watch_engine(self, engine: AsyncEngine, *, timeout: float, pooler: str | None) -> None:
        if pooler is not None:
            driver.watch_server_timeouts(engine, timeout)

    def wakeup_source(
        self, pool: Pool, channel: str, timeout: float, sink: WakeupSink
    ) -> WakeupSource | None:
        return Listener(pool, channel, timeout, sink)

    def migration_connect_args(
        self, *, timeout: float | None, connect_timeout: float, busy_seconds: float, create: bool
    ) -> dict[str, Any]:
        args: dict[str, Any] = {"timeout": connect_timeout}
        if timeout is not None:
            millis = str(max(1, round(timeout * 1000 * driver.SERVER_SHARE)))
            args["server_settings"] = {"statement_timeout": millis, "lock_timeout": millis}
        return args

    async def begin_migration(self, conn: AsyncConnection, *, prepare: bool, busy: float) -> None:
        await conn.begin()


BACKEND: Final = PostgresBackend()
