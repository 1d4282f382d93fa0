"""psycopg 3 behind a transaction pooler: one round trip per call, server-side timeouts kept.

Behind a transaction pooler (PgBouncer ``pool_mode = transaction``) a server connection moves
between clients after every transaction, so nothing may live in a session: no named prepared
statement (it would be bound on another server connection, possibly as another statement), no
startup parameter (the pooler refuses them), no ``SET`` (it would leak to the next client).
asyncpg needs two round trips for an unnamed statement (Parse/Describe, then Bind/Execute),
and can only set timeouts at connect time.

Here each call is one simple-protocol query, one round trip, no statement name at all::

    SET LOCAL statement_timeout = N; SET LOCAL lock_timeout = N; <the catalogue statement>

The three statements run in one implicit transaction (the pooler keeps the server connection
for it, and the settings end with it), so the server-side timeouts (80% of the call's timeout)
are in force for the statement itself and nothing leaks. Parameters are bound on the client
with psycopg's own literals (libpq's escaping, bytea as hex literals: NUL-safe), exactly what
`psycopg.AsyncClientCursor` would send; the query runs straight on the connection's libpq
handle (`psycopg_wire`: no cursor, no task per call), and failures raise psycopg's exceptions.

The hot statements go as calls of the table's plpgsql functions (migration 0005,
`functions`; the calls are the catalogue's `server_calls`), whose plans the server keeps per
session; a database without them (before 0005) answers ``undefined_function`` before running
anything, and the provider then sends the plain statements from that call on (logged once).

A cancelled call returns at once; its statement is cancelled on the server (a cancel request
through the pooler) and its results drained in a task of its own, which `settle` awaits
(bounded) before the connection is dropped.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final, cast
from urllib.parse import parse_qsl

import psycopg
from sqlalchemy import event
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import PoolProxiedConnection

from ...errors import LeaseValueError
from .. import Adaptor, CatalogueNow, Fetch
from .errors import NotSentError
from .libpq import DSN_PREFIX
from .pooler_text import PoolerStatements
from .psycopg_wire import Exchange

__all__ = ["DRIVER", "engine_url", "fetch_for", "settle", "watch_engine"]

DRIVER: Final = "postgresql+psycopg"
_CANCEL_GRACE: Final = 5.0  # seconds a cancelled statement's cancel request may take
_PENDING: Final = "sql_lease.cancelled"  # fairy.info key: the task of a cancelled statement
_SSL_MODES: Final = frozenset({"disable", "allow", "prefer", "require", "verify-ca", "verify-full"})
#: asyncpg's connect arguments (as `driver.engine_arguments` fills them), not psycopg's.
_ASYNCPG_ONLY: Final = (
    "server_settings",
    "statement_cache_size",
    "prepared_statement_cache_size",
    "prepared_statement_name_func",
    "timeout",
    "command_timeout",
    "ssl",
    "dsn",
)


def engine_url(url: URL) -> URL:
    """A `normalize_url` (asyncpg) URL as ``postgresql+psycopg``: libpq reads every parameter
    itself (``sslmode`` and the TLS files back in their libpq form, host lists as they are)."""
    query = dict(url.query)
    ssl = query.pop("ssl", None)
    if isinstance(ssl, str):
        query.setdefault("sslmode", ssl if ssl in _SSL_MODES else "require")
    dsn = query.pop("dsn", None)
    if isinstance(dsn, str) and dsn.startswith(DSN_PREFIX):
        for name, value in parse_qsl(dsn[len(DSN_PREFIX) :]):
            query.setdefault(name, value)
    query.pop("prepared_statement_cache_size", None)
    return url.set(drivername=DRIVER, query=query)


def watch_engine(engine: AsyncEngine, *, connect_timeout: float) -> None:
    """Turn the ``connect_args`` `from_url` made for asyncpg into psycopg's at each connect:
    autocommit, never a server-side prepared statement, ``application_name`` only."""

    def do_connect(_dialect: Any, _record: Any, _cargs: Any, cparams: dict[str, Any]) -> None:
        settings = cparams.get("server_settings") or {}
        timeout = cparams.get("timeout", connect_timeout)
        for name in _ASYNCPG_ONLY:
            cparams.pop(name, None)
        cparams.setdefault("application_name", settings.get("application_name", "sql_lease"))
        cparams.setdefault("connect_timeout", max(2, round(timeout)))  # libpq's least
        cparams["autocommit"] = True
        cparams["prepare_threshold"] = None  # never PREPARE: the pooler moves sessions

    event.listen(engine.sync_engine, "do_connect", do_connect)


#: Answered before anything ran: a missing function, or a plain statement Citus refuses.
_RETRIED: Final = (psycopg.errors.UndefinedFunction, psycopg.errors.FeatureNotSupported)


def fetch_for(timeout: float, catalogue: CatalogueNow) -> Adaptor:
    """The adaptor: per pooled psycopg connection, a fetch that runs a statement with the
    server-side timeouts at `SERVER_SHARE` of ``timeout``, in one round trip (module
    docstring); the calls of server functions come from ``catalogue`` (the provider's)."""
    statements = PoolerStatements(timeout, catalogue)
    miss = statements.template

    def adapt(fairy: PoolProxiedConnection, _catalogue: CatalogueNow) -> Fetch:
        conn = cast("psycopg.AsyncConnection[Any]", fairy.driver_connection)
        exchange = Exchange(conn)
        encoding = exchange.encoding
        cache = statements.cache(encoding)
        info = fairy.info

        async def fetch(sql: str, *args: object) -> list[Any]:
            if conn.closed or conn.broken:
                raise NotSentError("the connection is closed (nothing was sent)")
            if not conn.autocommit:  # a caller's engine: its statements would stay open
                raise LeaseValueError(
                    "a postgresql+psycopg engine must be in autocommit: "
                    'create_async_engine(url, isolation_level="AUTOCOMMIT")'
                )
            found = cache.get(sql) or miss(cache, sql, encoding)
            try:
                try:
                    return await exchange.run(exchange.query(found, args))
                except (
                    psycopg.errors.UndefinedFunction,
                    psycopg.errors.FeatureNotSupported,
                ) as exc:
                    # Raised while resolving the call (or planning a statement Citus refuses),
                    # before any statement ran (and the implicit transaction is rolled back
                    # whatever ran): the plain statement (or Citus's call) is safe to send.
                    if not (statements.fall_back(sql, exc) or statements.to_citus(sql, exc)):
                        raise
                    return await exchange.run(exchange.query(miss(cache, sql, encoding), args))
            except asyncio.CancelledError:
                task = asyncio.ensure_future(exchange.abandon(_CANCEL_GRACE))
                task.add_done_callback(_consume)
                info[_PENDING] = task
                raise

        return fetch

    return adapt


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: the caller already heard of the timeout


async def settle(fairy: PoolProxiedConnection) -> None:
    """Wait (bounded) until a cancelled statement has ended on the server."""
    task = fairy.info.pop(_PENDING, None)
    if isinstance(task, asyncio.Future) and not task.done():
        await asyncio.wait([task], timeout=_CANCEL_GRACE + 1)  # the task bounds itself
