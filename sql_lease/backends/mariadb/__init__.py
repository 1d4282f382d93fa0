"""MariaDB (10.6+) on asyncmy (and, for `sql_lease.sync`, PyMySQL): the only place they are
imported.

- `catalogue`: the statements (one per operation, each judged under its row lock) and the DDL;
- `placeholders`: numbered parameters in the drivers' ``%s`` form;
- `driver`: asyncmy's per-connection fetch, the session settings, ``KILL QUERY`` of a
  cancelled statement, ``from_url``'s engine defaults;
- `errors`: the one classifier and translation;
- `urls`: ``mariadb://`` and ``mariadb+asyncmy://`` checked, ``mysql://`` refused;
- `sync`: the PyMySQL executor of the sync provider.

No LISTEN/NOTIFY: waiters poll. No schemas (a MariaDB "schema" is a database: the URL's).
Migrations: DDL causes implicit commits on MariaDB, so each revision applies statement by
statement; concurrent migrators take turns on ``GET_LOCK`` (`begin_migration`).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy.engine import URL, Engine
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.pool import Pool, PoolProxiedConnection

from ..._core.failures import Failure
from ..._core.install import pip_install
from ...capabilities import WakeupSink, WakeupSource
from ...catalogue import Catalogue
from ...errors import LeaseDatabaseError, LeaseTimeoutError, LeaseValueError
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
from . import errors, urls
from .catalogue import SESSION_SQL_MODE, build_catalogue
from .sessions import session_sql

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["BACKEND", "MariadbBackend"]

_NO_POOLER: Final = "MariaDB has no pooler mode: leave pooler=None"


def _driver() -> ModuleType:
    """The asyncmy part (`driver`), imported on first use: the drivers are the ``mariadb``
    extra, and this package is imported whenever URL schemes are looked up."""
    try:
        from . import driver
    except ImportError as exc:
        raise LeaseValueError(
            f"MariaDB needs the mariadb extra (asyncmy, PyMySQL): {pip_install('mariadb')}"
        ) from exc
    return driver


class MariadbBackend:
    """The MariaDB `sql_lease.backends.Backend`."""

    name: Final = "mariadb"
    async_driver: Final = urls.ASYNC_DRIVER
    has_schemas: Final = False
    title: Final = "MariaDB"
    url_schemes: Final = urls.SCHEMES | urls.MYSQL_SCHEMES  # mysql: refused with the reason
    url_example: Final = "mariadb://user:password@host:3306/database"
    sync_driver: Final = urls.SYNC_DRIVER
    home_sql: Final = None

    def normalize_url(self, url: URL) -> URL:
        return urls.normalize_url(url)

    def split_hosts(self, scheme: str, rest: str) -> tuple[str, dict[str, str]]:
        return f"{scheme}://{rest}", {}  # one host per URL

    def redact(self, url: URL) -> str:
        return hide_secrets(url).render_as_string(hide_password=True)

    def url_connect_args(self, url: URL) -> tuple[URL, dict[str, Any]]:
        return url, {}

    def extra_tables(self, table_name: str) -> frozenset[str]:
        return frozenset()  # the fence sequence is the one PostgreSQL has too

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
        adaptor: Adaptor = _driver().adaptor(timeout)
        return adaptor

    async def settle(self, fairy: PoolProxiedConnection) -> None:
        """Kill the cancelled statement on the server (``KILL QUERY`` from a second
        connection), so it cannot apply after the caller heard "timeout"."""
        conn: Any = fairy.driver_connection
        if conn is not None and conn.connected:
            # Best effort: max_statement_time ends the statement anyway.
            with contextlib.suppress(Exception):
                await _driver().kill_query(conn)

    def plan(self, url: URL, options: PlanOptions) -> Plan:
        o = options
        if o.pooler is not None:
            raise LeaseValueError(_NO_POOLER)
        connect_args, engine_kwargs, listen_args = planned_arguments(o, _driver().engine_arguments)
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
            raise LeaseValueError(_NO_POOLER)
        if listen_url is not None:
            raise LeaseValueError("MariaDB has no LISTEN connection: leave listen_url=None")
        _driver()  # the extra's message when it is missing
        from .sync import MariadbExecutor, UrlSource, connect_kwargs

        kwargs = connect_kwargs(url, connect_timeout=connect_timeout, timeout=timeout)
        source = UrlSource(kwargs, settings=session_sql(timeout), size=pool_size)
        return MariadbExecutor(source, where=where, table=table)

    def sync_engine_executor(
        self,
        engine: Engine,
        table: str,
        *,
        where: str,
        timeout: float,
        catalogue: CatalogueNow | None = None,
    ) -> SyncExecutor:
        _driver()
        from .sync import EngineSource, MariadbExecutor

        source = EngineSource(engine, settings=session_sql(timeout))
        return MariadbExecutor(source, where=where, table=table)

    def sync_listener(
        self, channel: str, connect_kwargs: dict[str, Any], sink: WakeupSink
    ) -> SyncListener:
        raise LeaseValueError("MariaDB has no notifications: its waiters poll")

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
            raise LeaseValueError(_NO_POOLER)
        return {
            "connect_timeout": max(1, int(connect_timeout + 0.999)),
            "init_command": f"SET SESSION sql_mode = '{SESSION_SQL_MODE}', time_zone = '+00:00'",
        }

    async def begin_migration(
        self,
        conn: AsyncConnection,
        *,
        prepare: bool,
        busy: float,
        server_timeout: float | None = None,
        lock_key: int | None = None,
    ) -> None:
        """Begin, then take the migration lock: ``GET_LOCK``, a session lock (DDL commits
        implicitly on MariaDB, so no transaction could hold one); it ends with the migration's
        own connection (an engine the caller gave keeps it until that connection closes)."""
        await conn.begin()
        if server_timeout is not None:
            await conn.exec_driver_sql(f"SET SESSION max_statement_time = {server_timeout:.3f}")
        if lock_key is not None:
            wait = max(1, int(busy + 0.999))
            name = f"sql_lease_migration_{lock_key & (2**64 - 1):x}"
            got = await conn.exec_driver_sql(f"SELECT GET_LOCK('{name}', {wait})")
            if got.scalar() != 1:
                raise LeaseTimeoutError(
                    f"another migration of this leases table held the migration lock past {wait} s",
                    operation="migrate",
                )


BACKEND: Final = MariadbBackend()
