"""asyncmy: the per-connection fetch, the session settings, cancelling a statement on the
server, and ``from_url``'s engine defaults.

Every connection the provider uses runs `session_sql` once before its first statement (an
engine the caller gave included): ``sql_mode`` with
``SIMULTANEOUS_ASSIGNMENT``, the UTC time zone, ``max_statement_time`` and
``innodb_lock_wait_timeout`` at 80% of the call's timeout (the server ends a stuck statement,
saying nothing was applied, before the client's deadline), and autocommit. A statement
cancelled by the client's deadline is killed on the server (`settle`: ``KILL QUERY`` from a
second connection) before its connection is dropped, so it cannot apply later. Times come back
as aware UTC datetimes, keys and owners as bytes: rows decode as the other backends' do.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

import asyncmy
from sqlalchemy.pool import PoolProxiedConnection

from .. import Adaptor, CatalogueNow, Fetch
from .errors import NotSentError
from .placeholders import bound
from .sessions import session_sql

__all__ = ["KILL_GRACE", "adaptor", "aware_rows", "engine_arguments", "kill_query"]

#: Seconds `settle` may take to kill a cancelled statement on the server.
KILL_GRACE: Final = 5.0
_SESSION: Final = "sql_lease_session"


#: Naive and aware (UTC) origins: a naive UTC time ``v`` is ``_AWARE + (v - _NAIVE)``.
_NAIVE: Final = datetime(1970, 1, 1, tzinfo=UTC).replace(tzinfo=None)
_AWARE: Final = datetime(1970, 1, 1, tzinfo=UTC)


def aware_rows(rows: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """A result's rows with their (UTC, naive) datetimes made aware, in one call.

    A time is made aware by adding its distance from a naive origin to the aware one: two C
    operators, exact to the microsecond (``v.replace(tzinfo=UTC)`` costs about ten times as
    much: it parses its keywords and builds the datetime from its fields again). The drivers'
    datetimes have ``fold=0``, as the result's."""
    return [tuple([_AWARE + (v - _NAIVE) if type(v) is datetime else v for v in r]) for r in rows]


def adaptor(timeout: float) -> Adaptor:
    """Per pooled connection, the fetch of its asyncmy connection: the session settings for
    ``timeout`` on first use (remembered with the pooled connection), then each statement."""
    settings = session_sql(timeout)

    def fetch_of(fairy: PoolProxiedConnection, catalogue_now: CatalogueNow) -> Fetch:
        conn: Any = fairy.driver_connection
        info = fairy.info
        cursor = conn.cursor()  # one buffered cursor per connection: each execute resets it
        fresh = [info.get(_SESSION) != settings]

        async def fetch(sql: str, *args: object) -> list[tuple[Any, ...]]:
            if not conn.connected:
                raise NotSentError("the MariaDB connection is closed")
            if fresh[0]:
                await cursor.execute(settings)
                info[_SESSION] = settings
                fresh[0] = False
            text, bind = bound(sql)
            await cursor.execute(text, bind(args))
            rows = await cursor.fetchall()
            return aware_rows(rows) if rows else []

        return fetch

    return fetch_of


async def kill_query(conn: Any, seconds: float = KILL_GRACE) -> None:
    """End the statement running on asyncmy connection ``conn``, from a second connection to
    the same server as the same user (bounded by ``seconds``; best effort)."""
    thread = conn.thread_id()
    params: dict[str, Any] = {
        "host": conn._host,
        "port": conn._port,
        "user": conn._user,
        "password": conn._password,
        "connect_timeout": max(1, int(seconds)),
    }
    ssl = getattr(conn, "_ssl_context", None)
    if ssl is not None:
        params["ssl"] = ssl
    killer = await asyncio.wait_for(asyncmy.connect(**params), seconds)
    try:
        cursor = killer.cursor()
        with contextlib.suppress(asyncmy.errors.MySQLError):  # it ended already: no such thread
            await asyncio.wait_for(cursor.execute(f"KILL QUERY {int(thread)}"), seconds)
        await cursor.close()
    finally:
        killer.close()


def engine_arguments(
    connect_args: dict[str, Any],
    engine_kwargs: dict[str, Any],
    *,
    timeout: float,
    connect_timeout: float,
    synchronous_commit: bool,
) -> None:
    """Autocommit (the session settings come with the first statement: `adaptor`), the
    connect timeout, and a pool of 5 + 5 (as on the other backends); the caller's values win.
    ``synchronous_commit`` has no session form on MariaDB (the server's
    ``innodb_flush_log_at_trx_commit`` decides): a provider asked for ``False`` runs as
    ``True``."""
    given = dict(connect_args)
    connect_args.clear()
    connect_args.update(
        {
            "autocommit": True,
            "connect_timeout": max(1, math.ceil(connect_timeout)),
            **given,
        }
    )
    engine_kwargs.setdefault("pool_size", 5)
    engine_kwargs.setdefault("max_overflow", 5)
    engine_kwargs.setdefault("pool_timeout", timeout)
    engine_kwargs.setdefault("pool_pre_ping", False)
