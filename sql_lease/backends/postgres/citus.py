"""Citus: the same statements, sent as calls of the functions Citus runs on the key's worker.

On a database with the ``citus`` extension, migration 0008 distributes the leases table by
``key`` and makes every hot statement a plpgsql function (0006's names and signatures, bodies
that read the clock into a variable first: Citus refuses volatile functions in an ``UPDATE`` on
a distributed table); the one-key functions are distributed with the key as their argument, so
``SELECT * FROM f($1, ...)`` sent to the coordinator is delegated whole to the worker holding
that key (one round trip from here, its statements local there). This module detects Citus once
per provider (the first connection of a ``from_url`` engine; on a caller's engine, the first
call of its first connection) and then sends, instead of each catalogue text, its call:
0006's calls (`functions`, also pooler mode's) and the calls of 0008's own functions
(``force_release``, ``want``, ``renew_many``, ``purge``) registered here. A coalesced batch
goes to its batch function (which runs on the coordinator, one delegated call per key).
Plain PostgreSQL is untouched: its connections get asyncpg's own ``fetch``, no wrapper.

Waiting: a release runs on a worker, so its NOTIFY reaches that worker's listeners, not the
coordinator's where the provider LISTENs. On Citus waiters poll instead (`polls`); the provider
logs that once (INFO on ``sql_lease.wait``).
"""

from __future__ import annotations

import logging
import weakref
from functools import cache
from typing import Any, Final, cast

import asyncpg
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import Pool, PoolProxiedConnection
from sqlalchemy.util import await_only

from .. import Fetch
from . import functions
from .catalogue import build_catalogue, quote_ident

__all__ = ["DETECT_SQL", "Detected", "call_for", "fetch_for", "polls", "register", "watch"]

logger = logging.getLogger("sql_lease")

#: Whether this database has Citus (one query, at the first connection).
DETECT_SQL: Final = (
    "SELECT EXISTS (SELECT FROM pg_catalog.pg_extension"
    " WHERE extname OPERATOR(pg_catalog.=) 'citus')"
)
#: Catalogue statements with a function of migration 0008 only: attribute, function, arity.
_EXTRA: Final = (
    ("force_release", "force_release", 1),
    ("want", "want", 2),
    ("purge_batch", "purge", 2),
)


class Detected:
    """One provider's answer: None until its first connection said whether it is Citus."""

    __slots__ = ("__weakref__", "citus")

    def __init__(self) -> None:
        self.citus: bool | None = None

    def learn(self, citus: bool) -> None:
        if self.citus is None and citus:
            logger.info(
                "sql_lease: Citus detected: lease calls go to the distributed functions of"
                " migration 0008 (run on the worker holding each key)"
            )
        self.citus = citus


#: The answer of each pool a provider runs on (`polls`).
_POOLS: weakref.WeakKeyDictionary[Pool, Detected] = weakref.WeakKeyDictionary()
_CALLS: dict[str, str] = {}


@cache
def register(table_name: str, schema: str | None = None, home: str | None = None) -> None:
    """Record the calls of 0008's own functions for ``schema.table_name`` (or the table found
    in ``home``), beside 0006's (`functions.register`). Nothing without a schema yet."""
    where = schema if schema is not None else home
    if where is None:
        return
    cat = build_catalogue(table_name, schema, home)
    for attr, suffix, arity in _EXTRA:
        statement = getattr(cat, attr)
        name = f"{quote_ident(where)}.{quote_ident(f'{table_name}_{suffix}')}"
        _CALLS[statement.sql] = _call(name, arity)
    renew_many = cat.renew_many(1).sql
    name = f"{quote_ident(where)}.{quote_ident(f'{table_name}_renew_many')}"
    _CALLS[renew_many] = _call(name, 3)


def _call(name: str, arity: int) -> str:
    return f"SELECT * FROM {name}({', '.join(f'${n}' for n in range(1, arity + 1))})"


def call_for(sql: str) -> str:
    """What goes to a Citus coordinator for catalogue statement ``sql``: its function's call,
    or ``sql`` itself (reads over many keys, the clock, the guard: Citus takes them as they
    are)."""
    return functions.call_for(sql) or _CALLS.get(sql) or sql


def fetch_for(fairy: PoolProxiedConnection, detected: Detected) -> Fetch:
    """The fetch of one asyncpg connection: asyncpg's own when the database is known not to be
    Citus; the calls when it is; until then, one that asks first (a caller's engine)."""
    conn = cast("asyncpg.Connection", fairy.driver_connection)
    if detected.citus is False:
        return conn.fetch
    plain = conn.fetch
    if detected.citus:

        async def citus_fetch(sql: str, *args: Any) -> list[Any]:
            return await plain(call_for(sql), *args)

        return citus_fetch
    pool = getattr(fairy, "_pool", None)  # SQLAlchemy's fairy keeps its pool there

    async def asking_fetch(sql: str, *args: Any) -> list[Any]:
        if detected.citus is None:
            detected.learn(bool(await conn.fetchval(DETECT_SQL)))
            if isinstance(pool, Pool):
                _POOLS[pool] = detected
        return await plain(call_for(sql) if detected.citus else sql, *args)

    return asking_fetch


def watch(engine: AsyncEngine, detected: Detected) -> None:
    """Ask at ``engine``'s first connection (before any connection is handed out)."""
    pool = engine.sync_engine.pool
    _POOLS[pool] = detected

    def first_connect(dbapi_connection: Any, _record: object) -> None:
        conn = cast("asyncpg.Connection", dbapi_connection.driver_connection)
        try:
            found = await_only(conn.fetchval(DETECT_SQL))
        except Exception as exc:  # the first call asks again (`fetch_for`)
            logger.debug("could not tell whether the database is Citus: %s", exc)
            return
        detected.learn(bool(found))

    event.listen(engine.sync_engine, "first_connect", first_connect)


def polls(pool: Pool) -> bool:
    """True when the provider on ``pool`` runs on Citus: its waiters poll."""
    detected = _POOLS.get(pool)
    return detected is not None and bool(detected.citus)
