"""asyncpg: the per-connection fetch, cancel-then-drop, and ``from_url``'s engine defaults."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any, Final, cast

import asyncpg
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.util import await_only

from ..._core.deadlines import server_millis
from .. import POOLED, Fetch

__all__ = ["engine_arguments", "fetch_of", "settle", "watch_server_timeouts"]

logger = logging.getLogger("sql_lease")

_CANCEL_GRACE: Final = 5.0  # seconds a cancelled statement's cancel request may take


def fetch_of(fairy: PoolProxiedConnection) -> Fetch:
    """asyncpg's own ``Connection.fetch``, bound: no wrapper frame on the hot path. It
    raises `asyncpg.InterfaceError` on a closed connection before sending anything."""
    conn = cast("asyncpg.Connection", fairy.driver_connection)
    return conn.fetch


async def settle(fairy: PoolProxiedConnection) -> None:
    """Wait (bounded) for the cancel request asyncpg sent when its fetch was cancelled:
    dropping the connection first would let the statement live on and apply later."""
    pending = list(getattr(fairy.driver_connection, "_cancellations", ()))
    if pending:
        await asyncio.wait(pending, timeout=_CANCEL_GRACE)


def engine_arguments(
    connect_args: dict[str, Any],
    engine_kwargs: dict[str, Any],
    *,
    timeout: float,
    connect_timeout: float,
    synchronous_commit: bool,
    pooler: str | None = None,
) -> None:
    """The server gives up first (``statement_timeout``/``lock_timeout`` at 80% of
    ``timeout``), so a statement stuck behind a lock ends in a clean error with nothing
    applied; the client-side deadline is the backstop for a stalled network.

    Behind a ``pooler`` (``"transaction"`` or ``"session"``): no startup parameter but
    ``application_name`` (a pooler refuses the others), and only unnamed statements
    (asyncpg's cache off; SQLAlchemy's own statements get unique names), so a statement can
    never be bound on another server connection than the one it was parsed on. The server-side
    timeouts are then whatever the role or the pooler sets (see `watch_server_timeouts`); the
    client-side deadline still bounds every call. Behind ``"transaction"`` the provider's own
    engine runs on psycopg instead (`psycopg_driver`: one round trip per call, the timeouts set
    inside it), marked with the `POOLED` execution option; these asyncpg arguments still serve
    its LISTEN engine and the migrations, and `psycopg_driver.watch_engine` translates them.
    """
    if pooler is not None:
        connect_args["server_settings"] = {
            "application_name": "sql_lease",
            **connect_args.get("server_settings", {}),
        }
        connect_args.setdefault("statement_cache_size", 0)
        connect_args.setdefault("prepared_statement_cache_size", 0)
        connect_args.setdefault("prepared_statement_name_func", _unique_statement_name)
        connect_args.setdefault("timeout", connect_timeout)
        engine_kwargs.setdefault("pool_size", 10)
        engine_kwargs.setdefault("max_overflow", 10)
        engine_kwargs.setdefault("pool_timeout", timeout)
        if pooler == "transaction":  # the engine runs on psycopg (`psycopg_driver`)
            options = dict(engine_kwargs.get("execution_options") or {})
            engine_kwargs["execution_options"] = {**options, POOLED: pooler}
        return
    millis = str(server_millis(timeout))
    connect_args["server_settings"] = {
        "application_name": "sql_lease",
        "statement_timeout": millis,
        "lock_timeout": millis,
        **({} if synchronous_commit else {"synchronous_commit": "off"}),
        **connect_args.get("server_settings", {}),
    }
    connect_args.setdefault("timeout", connect_timeout)
    engine_kwargs.setdefault("pool_size", 10)
    engine_kwargs.setdefault("max_overflow", 10)
    engine_kwargs.setdefault("pool_timeout", timeout)


def _unique_statement_name() -> str:
    return f"__sql_lease_{uuid.uuid4().hex}__"


_TIMEOUTS_SQL: Final = (
    "SELECT current_user, pg_catalog.current_setting('statement_timeout'),"
    " pg_catalog.current_setting('lock_timeout')"
)


def watch_server_timeouts(engine: AsyncEngine, timeout: float) -> None:
    """At ``engine``'s first connection, read the server-side timeouts once (one unnamed
    statement) and log a WARNING on ``sql_lease`` naming the fix when either is 0: behind a
    pooler they cannot be sent at connect time, only the client-side deadline is left."""
    millis = server_millis(timeout)

    def first_connect(dbapi_connection: Any, _record: object) -> None:
        conn = cast("asyncpg.Connection", dbapi_connection.driver_connection)
        try:
            row = await_only(conn.fetchrow(_TIMEOUTS_SQL))
        except Exception as exc:  # a diagnostic only: never fail the connection for it
            logger.debug("could not read the server-side timeouts: %s", exc)
            return
        if row is None:
            return
        role, statement, lock = row
        if statement == "0" or lock == "0":
            logger.warning(
                "server-side timeouts are off behind the pooler (statement_timeout=%s, "
                "lock_timeout=%s): only the client-side deadline ends a stuck statement, and the "
                "server may keep running it. Set them for the role: "
                "ALTER ROLE %s SET statement_timeout = '%dms'; "
                "ALTER ROLE %s SET lock_timeout = '%dms' (or a PgBouncer connect_query)",
                statement,
                lock,
                _quote_ident(role),
                millis,
                _quote_ident(role),
                millis,
            )

    event.listen(engine.sync_engine, "first_connect", first_connect)


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
