"""PostgreSQL on asyncpg (and, for `sql_lease.sync`, psycopg 3): the only place they are imported.

- `catalogue`: the statements (guard included), plain data;
- `driver`: asyncpg's per-connection fetch, cancel-then-drop, ``from_url`` engine defaults;
- `psycopg_driver`: psycopg's fetch behind a transaction pooler (one round trip per call,
  server-side timeouts set inside it);
- `psycopg_wire`: that fetch's one simple-protocol query on the libpq handle (no cursor, no
  task per call);
- `functions`: the server functions (migrations 0005/0006) and their calls, which the
  catalogue keeps (`Catalogue.server_calls`) and pooler mode sends instead of the hot
  statements;
- `citus`: on a Citus database (detected once per provider), each statement sent as the call of
  its function (migrations 0008, 0010 and 0011; `citus_calls`: the calls, kept in the
  catalogue), run on the worker holding the key; a batch as one call per worker (`shards`), an
  all-or-none call as one coordinator function; waiters poll there;
- `errors`: the one classifier and translation (asyncpg, psycopg, SQLAlchemy);
- `listen`: the LISTEN connection (the wake-up source of waiters);
- `urls`: its URL schemes and their checks (``from_url``'s URLs, set to asyncpg);
- `sync`, `sync_connect`, `sync_listen`: psycopg's executor, how it connects, and the LISTEN
  thread for the sync provider.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Final

import asyncpg
from sqlalchemy.engine import URL, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.pool import Pool, PoolProxiedConnection

from ..._core.deadlines import server_millis
from ..._core.failures import Failure
from ..._core.install import pip_install
from ...capabilities import WakeupSink, WakeupSource
from ...catalogue import Catalogue
from ...errors import LeaseDatabaseError, LeaseValueError
from .. import (
    Adaptor,
    CatalogueNow,
    Fetch,
    Plan,
    PlanOptions,
    SyncExecutor,
    SyncListener,
    planned_arguments,
)
from . import citus, driver, errors, urls
from .catalogue import HOME_SQL, build_catalogue
from .listen import Listener

__all__ = ["BACKEND", "POOLED_READ_BATCHES", "POOLED_WRITE_BATCHES", "PostgresBackend"]

#: Read and write batches in flight at once behind ``pooler="transaction"`` (`Plan`'s
#: ``read_batches``, ``write_batches``; straight to the server 1 each: one batch at a time
#: carries the most calls). Through a pooler each batch waits out one more hop, and the
#: pooler has server connections to run several side by side: three read batches cost no
#: more server CPU per read than one (benchmarks/bench_pooler.py); three write batches cost
#: 13-44% more per lifecycle operation (each carries a third of the calls, each statement
#: has its commit and its ``SET LOCAL`` prefix), so writes keep one.
POOLED_READ_BATCHES: Final = 3
POOLED_WRITE_BATCHES: Final = 1


class PostgresBackend:
    """The PostgreSQL `sql_lease.backends.Backend`."""

    name: Final = "postgresql"
    async_driver: Final = "postgresql+asyncpg"
    has_schemas: Final = True
    title: Final = "PostgreSQL"
    url_schemes: Final = urls.SCHEMES
    url_example: Final = "postgresql://user:password@host:port/db (or postgres://)"
    sync_driver: Final = "postgresql+psycopg"

    def normalize_url(self, url: URL) -> URL:
        return urls.normalize_url(url)

    def split_hosts(self, scheme: str, rest: str) -> tuple[str, dict[str, str]]:
        return urls.split_hosts(scheme, rest)

    def redact(self, url: URL) -> str:
        return urls.redact(url)

    def url_connect_args(self, url: URL) -> tuple[URL, dict[str, Any]]:
        return urls.url_connect_args(url)

    def extra_tables(self, table_name: str) -> frozenset[str]:
        return frozenset()  # the fence is a sequence, which autogenerate does not compare

    home_sql: Final = HOME_SQL

    def catalogue(self, table_name: str, schema: str | None, home: str | None = None) -> Catalogue:
        # server_calls: pooler mode's calls; distributed: those a Citus coordinator takes
        return build_catalogue(table_name, schema, home)

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
        return self._adaptor(timeout, citus.Detected())

    def _adaptor(self, timeout: float, detected: citus.Detected) -> Adaptor:
        # asyncpg: timeouts and durability are server settings of the connection
        # (engine_arguments); psycopg (behind a transaction pooler): set per statement.
        # ``detected``: whether the database is Citus (asked once, `citus`).
        psycopg_fetch: list[Adaptor] = []

        def adapt(fairy: PoolProxiedConnection, catalogue: CatalogueNow) -> Fetch:
            if isinstance(fairy.driver_connection, asyncpg.Connection):
                return citus.fetch_for(fairy, detected, catalogue)
            if not psycopg_fetch:
                from . import psycopg_driver  # psycopg: imported only on a psycopg engine

                psycopg_fetch.append(psycopg_driver.fetch_for(timeout, catalogue))
            return psycopg_fetch[0](fairy, catalogue)

        return adapt

    async def settle(self, fairy: PoolProxiedConnection) -> None:
        if isinstance(fairy.driver_connection, asyncpg.Connection):
            await driver.settle(fairy)
        else:
            from . import psycopg_driver

            await psycopg_driver.settle(fairy)

    def _engine_url(self, url: URL, pooler: str | None) -> URL:
        if pooler != "transaction":
            return url
        try:
            from . import psycopg_driver
        except ImportError as exc:
            raise LeaseValueError(
                f'pooler="transaction" runs on psycopg 3: {pip_install("pooler")}'
            ) from exc
        return psycopg_driver.engine_url(url)

    def plan(self, url: URL, options: PlanOptions) -> Plan:
        o = options
        detected = citus.Detected()
        connect_args, engine_kwargs, listen_args = planned_arguments(
            o, functools.partial(driver.engine_arguments, pooler=o.pooler)
        )
        return Plan(
            engine_url=self._engine_url(url, o.pooler),
            connect_args=connect_args,
            engine_kwargs=engine_kwargs,
            adaptor=self._adaptor(o.timeout, detected),
            watch=lambda engine: self._watch_engine(engine, o.timeout, o.pooler, detected),
            pooler=o.pooler,
            # LISTEN needs a session: behind a transaction pooler only on ``listen_url``.
            listens=o.pooler != "transaction" or o.listen_url is not None,
            listen_url=o.listen_url,
            listen_connect_args=listen_args,
            read_batches=POOLED_READ_BATCHES if o.pooler == "transaction" else 1,
            write_batches=POOLED_WRITE_BATCHES if o.pooler == "transaction" else 1,
        )

    def _watch_engine(
        self, engine: AsyncEngine, timeout: float, pooler: str | None, detected: citus.Detected
    ) -> None:
        if engine.dialect.driver == "psycopg":
            from . import psycopg_driver

            psycopg_driver.watch_engine(engine, connect_timeout=timeout)
            return
        citus.watch(engine, detected)
        if pooler is not None:
            driver.watch_server_timeouts(engine, timeout)

    def wakeup_source(
        self, pool: Pool, channel: str, timeout: float, sink: WakeupSink
    ) -> WakeupSource | None:
        if citus.polls(pool):  # a worker's NOTIFY never reaches the coordinator's LISTEN
            logging.getLogger("sql_lease.wait").info(
                "on Citus a release notifies the listeners of the worker holding the key, not"
                " the coordinator's: waiters poll"
            )
            return None
        return Listener(pool, channel, timeout, sink)

    def key_groups(
        self, pool: Pool, catalogue: Catalogue, keys: list[bytes]
    ) -> list[list[int]] | None:
        return citus.key_groups(pool, catalogue, keys)

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
        from .sync_connect import url_executor  # psycopg: the `sync` extra, imported on use

        return url_executor(
            url,
            table,
            where=where,
            timeout=timeout,
            connect_timeout=connect_timeout,
            synchronous_commit=synchronous_commit,
            pool_size=pool_size,
            pooler=pooler,
            listen_url=listen_url,
            catalogue=catalogue,
        )

    def sync_engine_executor(
        self,
        engine: Engine,
        table: str,
        *,
        where: str,
        timeout: float,
        catalogue: CatalogueNow | None = None,
    ) -> SyncExecutor:
        from .sync_connect import engine_executor

        return engine_executor(engine, table, where=where, timeout=timeout, catalogue=catalogue)

    def sync_listener(
        self, channel: str, connect_kwargs: dict[str, Any], sink: WakeupSink
    ) -> SyncListener:
        from .sync_listen import Listener  # psycopg: imported only by a sync provider

        return Listener(channel, connect_kwargs, sink)

    def migration_connect_args(
        self,
        *,
        timeout: float | None,
        connect_timeout: float,
        busy_seconds: float,
        create: bool,
        pooler: str | None = None,
    ) -> dict[str, Any]:
        args: dict[str, Any] = {"timeout": connect_timeout}
        if pooler is not None:  # unnamed statements, no startup parameter but the name
            bound = connect_timeout if timeout is None else timeout
            driver.engine_arguments(
                args,
                {},
                timeout=bound,
                connect_timeout=connect_timeout,
                synchronous_commit=True,
                pooler=pooler,
            )
            return args
        if timeout is not None:
            millis = str(server_millis(timeout))
            args["server_settings"] = {"statement_timeout": millis, "lock_timeout": millis}
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
        await conn.begin()
        if server_timeout is not None:
            millis = max(1, round(server_timeout * 1000))
            for name in ("statement_timeout", "lock_timeout"):
                await conn.exec_driver_sql(f"SET LOCAL {name} = {millis}")
        if lock_key is not None:  # a transaction-level lock: it holds behind a pooler too
            key = int(lock_key)
            await conn.exec_driver_sql(f"SELECT pg_catalog.pg_advisory_xact_lock({key})")


BACKEND: Final = PostgresBackend()
