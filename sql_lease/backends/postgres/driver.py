"""asyncpg: the per-connection fetch, cancel-then-drop, and ``from_url``'s engine defaults."""

from __future__ import annotations

import asyncio
from typing import Any, Final, cast

import asyncpg
from sqlalchemy.pool import PoolProxiedConnection

from .. import Fetch

__all__ = ["SERVER_SHARE", "engine_arguments", "fetch_of", "settle"]

SERVER_SHARE: Final = 0.8  # server-side statement/lock timeout as a share of the call's timeout
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
) -> None:
    """The server gives up first (``statement_timeout``/``lock_timeout`` at 80% of
    ``timeout``), so a statement stuck behind a lock ends in a clean error with nothing
    applied; the client-side deadline is the backstop for a stalled network."""
    millis = str(max(1, round(timeout * 1000 * SERVER_SHARE)))
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
