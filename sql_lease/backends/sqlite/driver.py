"""aiosqlite: the per-connection fetch (start-up rule on first use, datetimes parsed) and
``from_url``'s engine defaults."""

from __future__ import annotations

import weakref
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.pool import PoolProxiedConnection

from ..._core.deadlines import SERVER_SHARE
from .. import Adaptor, CatalogueNow, Fetch
from .errors import ConnectionClosed
from .startup import open_existing, pragmas, start

__all__ = ["SqliteConnection", "adaptor", "engine_arguments", "parse_time"]


def parse_time(value: object) -> object:
    """SQLite's UTC text times as aware datetimes (the only text it returns here: keys and
    owners are blobs)."""
    if isinstance(value, str):
        return datetime.fromisoformat(value).replace(tzinfo=UTC)
    return value


# aiosqlite connections that have been through the start-up rule (the pool reuses them).
_started: weakref.WeakSet[Any] = weakref.WeakSet()


class SqliteConnection:
    """One aiosqlite connection as the provider's `Fetch`: the first use runs the start-up
    rule (`startup.start`); a closed connection raises `ConnectionClosed` before sending."""

    __slots__ = ("_conn", "_settings")

    def __init__(self, conn: Any, settings: tuple[str, ...]) -> None:
        self._conn = conn
        self._settings = settings

    async def fetch(self, sql: str, *args: object) -> list[tuple[Any, ...]]:
        conn = self._conn
        if getattr(conn, "_connection", True) is None:
            raise ConnectionClosed("the SQLite connection is closed")
        if conn not in _started:
            await start(conn, self._settings)
            _started.add(conn)
        cursor = await conn.execute(sql, args)
        try:
            rows = await cursor.fetchall()
        finally:
            await cursor.close()
        return [tuple(parse_time(v) for v in row) for row in rows]


def adaptor(timeout: float, synchronous_commit: bool) -> Adaptor:
    """Per pooled connection, a `SqliteConnection`'s fetch with the pragmas for ``timeout``."""
    settings = pragmas(timeout, synchronous_commit)

    def fetch_of(fairy: PoolProxiedConnection, _catalogue: CatalogueNow) -> Fetch:
        return SqliteConnection(fairy.driver_connection, settings).fetch

    return fetch_of


def engine_arguments(
    connect_args: dict[str, Any],
    engine_kwargs: dict[str, Any],
    *,
    timeout: float,
    connect_timeout: float,
    synchronous_commit: bool,
) -> None:
    """Autocommit (every statement its own transaction, as on PostgreSQL), SQLite's busy
    timeout at 80% of ``timeout``, and `open_existing`: a provider never creates a file."""
    given = dict(connect_args)
    connect_args.clear()
    connect_args.update(
        {
            "isolation_level": None,
            "timeout": timeout * SERVER_SHARE,
            "async_creator_fn": open_existing,
            **given,
        }
    )
    engine_kwargs.setdefault("pool_size", 5)
    engine_kwargs.setdefault("max_overflow", 5)
    engine_kwargs.setdefault("pool_timeout", timeout)
