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

from sqlalchemy.engine import URL, Engine
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.pool import Pool, PoolProxiedConnection

from ..._core.failures import Failure
from ...capabilities import WakeupSink, WakeupSource
from ...catalogue import Catalogue
from ...errors import LeaseDatabaseError, LeaseValueError
from .. import (
    Adaptor,
    CatalogueNow,
    Plan,
    PlanOptions,
    SyncExecutor,
    SyncListener,
    planned_arguments,
)
from .._urls import hide_secrets
from . import driver, errors, startup
from .catalogue import build_catalogue, counter_table_name

__all__ = ["BACKEND", "SqliteBackend"]


class SqliteBackend:
    """The SQLite `sql_lease.backends.Backend`."""

    name: Final = "sqlite"
    async_driver: Final = "sqlite+aiosqlite"
    has_schemas: Final = False
    title: Final = "SQLite"
    url_schemes: Final = frozenset({"sqlite", "sqlite+aiosqlite"})
    url_example: Final = "sqlite:///path.db"
    sync_driver: Final = "sqlite+pysqlite"

    def normalize_url(self, url: URL) -> URL:
        """A file (``sqlite:///path``); an in-memory database is refused."""
        if url.database in (None, "", ":memory:") or "mode=memory" in str(url.query):
            raise LeaseValueError(
                "an in-memory SQLite database is private to one connection: use a file, "
                "sqlite:///path/to/leases.db (or InMemoryLeaseProvider within one process)"
            )
        return url.set(drivername=self.async_driver)

    def split_hosts(self, scheme: str, rest: str) -> tuple[str, dict[str, str]]:
        return f"{scheme}://{rest}", {}  # a file path: no hosts

    def redact(self, url: URL) -> str:
        return hide_secrets(url).render_as_string(hide_password=True)

    def url_connect_args(self, url: URL) -> tuple[URL, dict[str, Any]]:
        return url, {}

    def extra_tables(self, table_name: str) -> frozenset[str]:
        return frozenset({counter_table_name(table_name)})  # PostgreSQL's fence sequence

    home_sql: Final = None

    def catalogue(self, table_name: str, schema: str | None, home: str | None = None) -> Catalogue:
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

    def plan(self, url: URL, options: PlanOptions) -> Plan:
        o = options
        if o.pooler is not None:
            raise LeaseValueError("SQLite has no connection pooler: leave pooler=None")
        connect_args, engine_kwargs, listen_args = planned_arguments(o, driver.engine_arguments)
        return Plan(
            engine_url=url,
            connect_args=connect_args,
            engine_kwargs=engine_kwargs,
            adaptor=self.adaptor(o.timeout, o.synchronous_commit),
            watch=lambda engine: None,
            pooler=None,
            listens=True,  # no notifications anyway: `wakeup_source` is None, waiters poll
            listen_url=o.listen_url,
            listen_connect_args=listen_args,
        )

    def wakeup_source(
        self, pool: Pool, channel: str, timeout: float, sink: WakeupSink
    ) -> WakeupSource | None:
        return None

    def key_groups(
        self, pool: Pool, catalogue: Catalogue, keys: list[bytes]
    ) -> list[list[int]] | None:
        return None

    def sync_url_executor(
        self,
        url: URL,
        table: str,
        *,
        where: str,
        timeout: float,
        connect_timeout: float,
        synchronous_commit: bool,
        pool_size: int,
        pooler: str | None = None,
        listen_url: URL | None = None,
        catalogue: CatalogueNow | None = None,
    ) -> SyncExecutor:
        if pooler is not None:
            raise LeaseValueError("SQLite has no connection pooler: leave pooler=None")
        if listen_url is not None:
            raise LeaseValueError("SQLite has no LISTEN connection: leave listen_url=None")
        from .sync import FileSqliteSource, SqliteExecutor, pragmas

        path = url.database
        assert path is not None  # normalize_url refused the rest
        settings = pragmas(timeout, synchronous_commit)
        source = FileSqliteSource(path, settings=settings, size=pool_size)
        return SqliteExecutor(source, where=where, table=table)

    def sync_engine_executor(
        self,
        engine: Engine,
        table: str,
        *,
        where: str,
        timeout: float,
        catalogue: CatalogueNow | None = None,
    ) -> SyncExecutor:
        from .sync import EngineSqliteSource, SqliteExecutor, pragmas

        source = EngineSqliteSource(engine, settings=pragmas(timeout, True))
        return SqliteExecutor(source, where=where, table=table)

    def sync_listener(
        self, channel: str, connect_kwargs: dict[str, Any], sink: WakeupSink
    ) -> SyncListener:
        raise LeaseValueError("SQLite has no notifications: its waiters poll")

    def migration_connect_args(
        self,
        *,
        timeout: float | None,
        connect_timeout: float,
        busy_seconds: float,
        create: bool,
        pooler: str | None = None,
    ) -> dict[str, Any]:
        if pooler is not None:
            raise LeaseValueError("SQLite has no connection pooler: leave pooler=None")
        # Driver-level autocommit: the migration's transaction is the one it begins itself.
        args: dict[str, Any] = {"isolation_level": None, "timeout": busy_seconds}
        if not create:
            args["async_creator_fn"] = startup.open_existing
        return args

    async def begin_migration(
        self,
        conn: AsyncConnection,
        *,
        prepare: bool,
        busy: float,
        server_timeout: float | None = None,
        lock_key: int | None = None,
    ) -> None:
        if prepare:  # the upgrade puts the file in WAL mode, once, for every later connection
            raw = await conn.get_raw_connection()
            await startup.ensure_wal(raw.driver_connection, busy)
        await conn.exec_driver_sql("BEGIN IMMEDIATE")


BACKEND: Final = SqliteBackend()
