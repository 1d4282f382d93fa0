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
import re
import weakref
from functools import cache
from typing import Any, Final, cast

import asyncpg
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import Pool, PoolProxiedConnection
from sqlalchemy.util import await_only

from ...catalogue import WRITE_KINDS
from .. import Fetch
from .catalogue import build_catalogue, quote_ident

__all__ = ["DETECT_SQL", "DISTRIBUTED_SQL", "Detected", "fetch_for", "polls", "register", "watch"]

logger = logging.getLogger("sql_lease")

#: Whether this database has Citus (one query, at the first connection) ...
DETECT_SQL: Final = (
    "SELECT EXISTS (SELECT FROM pg_catalog.pg_extension"
    " WHERE extname OPERATOR(pg_catalog.=) 'citus')"
)
#: ... and then which tables are distributed (schema, name): only their statements become calls
#: (before 0008 the table is a plain table on the coordinator, which takes the statements).
DISTRIBUTED_SQL: Final = (
    "SELECT n.nspname::pg_catalog.text, c.relname::pg_catalog.text"
    " FROM pg_catalog.pg_dist_partition AS p"
    " JOIN pg_catalog.pg_class AS c ON c.oid OPERATOR(pg_catalog.=) p.logicalrelid"
    " JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace"
)
#: Catalogue statements with a function of migration 0008 only: attribute, function, arity.
_EXTRA: Final = (
    ("force_release", "force_release", 1),
    ("want", "want", 2),
    ("purge_batch", "purge", 2),
)

Table = tuple[str, str]
#: The array types of the functions' arguments, as a cast names them.
_ARRAYS: Final = {"bytea[]": "pg_catalog.bytea[]", "bigint[]": "pg_catalog.int8[]"}


class Detected:
    """One provider's answer: ``citus`` None until its first connection said whether the
    database is Citus; ``tables``, the distributed tables (schema, name)."""

    __slots__ = ("__weakref__", "citus", "tables")

    def __init__(self) -> None:
        self.citus: bool | None = None
        self.tables: frozenset[Table] = frozenset()

    async def ask(self, conn: asyncpg.Connection) -> None:
        """Ask ``conn``'s database (once per provider)."""
        citus = bool(await conn.fetchval(DETECT_SQL))
        if citus:
            self.tables = frozenset((s, t) for s, t in await conn.fetch(DISTRIBUTED_SQL))
            logger.info(
                "sql_lease: Citus detected: the statements of its distributed lease tables go"
                " as calls of the functions of migration 0008 (run on the worker holding each"
                " key)"
            )
        self.citus = citus

    def call_for(self, sql: str) -> str:
        """What goes to the coordinator for catalogue statement ``sql``: the call of its
        function when its table is distributed, else ``sql`` itself (reads over many keys, the
        clock: Citus takes them as they are)."""
        found = _CALLS.get(sql)
        return found[1] if found is not None and found[0] in self.tables else sql

    async def send(self, fetch: Fetch, sql: str, args: tuple[Any, ...]) -> list[Any]:
        """Run ``sql`` with ``args`` through ``fetch`` as Citus takes it (`call_for`; array
        arguments as their text)."""
        found = _CALLS.get(sql)
        if found is None or found[0] not in self.tables:
            return await fetch(sql, *args)
        _, call, arrays = found
        if arrays:
            args = tuple(_array_text(a) if n in arrays else a for n, a in enumerate(args))
        return await fetch(call, *args)


#: The answer of each pool a provider runs on (`polls`).
_POOLS: weakref.WeakKeyDictionary[Pool, Detected] = weakref.WeakKeyDictionary()
#: Statement text -> its table, the call that replaces it on Citus, its array arguments' indexes.
Call = tuple[Table, str, tuple[int, ...]]
_CALLS: dict[str, Call] = {}


@cache
def register(table_name: str, schema: str | None = None, home: str | None = None) -> None:
    """Record the call of each statement of ``schema.table_name`` (or of the table found in
    ``home``) that has a function: 0006's (`functions`, pooler mode's) and 0008's own. Nothing
    without a schema yet (its texts are never sent)."""
    where = schema if schema is not None else home
    if where is None:
        return
    table = (where, table_name)
    cat = build_catalogue(table_name, schema, home)  # its server_calls: 0006's functions
    if cat.batches is None:  # never for PostgreSQL's catalogue
        raise ValueError("a PostgreSQL catalogue has batches")
    texts = [
        getattr(cat, a).sql
        for a in ("acquire", "renew", "release", "transfer", "get_owner", "get_lease", "holder")
    ]
    texts.append(cat.batches.read.sql)
    texts.extend(cat.batches.writes(kinds).sql for kinds in _kind_sets())
    for text in texts:
        found = cat.server_calls.get(text)
        if found is not None:
            _CALLS[text] = _entry(table, found.call, found.arguments)
    for attr, suffix, arity in _EXTRA:
        name = f"{quote_ident(where)}.{quote_ident(f'{table_name}_{suffix}')}"
        _CALLS[getattr(cat, attr).sql] = _entry(table, _call(name, arity), ())
    name = f"{quote_ident(where)}.{quote_ident(f'{table_name}_renew_many')}"
    renew_many = _call(name, 3)
    _CALLS[cat.renew_many(1).sql] = _entry(table, renew_many, ("bytea[]", "bytea[]", "bigint"))


def _kind_sets() -> list[tuple[int, ...]]:
    return [
        tuple(k for k in range(len(WRITE_KINDS)) if mask >> k & 1)
        for mask in range(1, 1 << len(WRITE_KINDS))
    ]


def _entry(table: Table, call: str, types: tuple[str, ...]) -> Call:
    """An array argument goes as the text of the array, cast on the server: asyncpg looks an
    array type up in the catalogue once per connection, a query that takes about a second in a
    Citus database (its many catalogue relations), which a first renewal cannot wait for."""
    arrays = tuple(n for n, t in enumerate(types) if t.endswith("[]"))

    def cast_of(match: re.Match[str]) -> str:
        n = int(match[1]) - 1
        return f"{match[0]}::pg_catalog.text::{_ARRAYS[types[n]]}" if n in arrays else match[0]

    return table, re.sub(r"\$(\d+)", cast_of, call), arrays


def _array_text(values: list[Any]) -> str:
    """An array's text form: of ``bytes`` (hex, quoted) or of integers."""
    if values and isinstance(values[0], bytes | bytearray | memoryview):
        return "{" + ",".join(f'"\\\\x{bytes(v).hex()}"' for v in values) + "}"
    return "{" + ",".join(str(int(v)) for v in values) + "}"


def _call(name: str, arity: int) -> str:
    return f"SELECT * FROM {name}({', '.join(f'${n}' for n in range(1, arity + 1))})"


def fetch_for(fairy: PoolProxiedConnection, detected: Detected) -> Fetch:
    """The fetch of one asyncpg connection: asyncpg's own when the database is known not to be
    Citus; the calls when it is; until then, one that asks first (a caller's engine)."""
    conn = cast("asyncpg.Connection", fairy.driver_connection)
    if detected.citus is False:
        return conn.fetch
    plain = conn.fetch
    if detected.citus:
        send = detected.send

        async def citus_fetch(sql: str, *args: Any) -> list[Any]:
            return await send(plain, sql, args)

        return citus_fetch
    pool = getattr(fairy, "_pool", None)  # SQLAlchemy's fairy keeps its pool there

    async def asking_fetch(sql: str, *args: Any) -> list[Any]:
        if detected.citus is None:
            await detected.ask(conn)
            if isinstance(pool, Pool):
                _POOLS[pool] = detected
        if detected.citus:
            return await detected.send(plain, sql, args)
        return await plain(sql, *args)

    return asking_fetch


def watch(engine: AsyncEngine, detected: Detected) -> None:
    """Ask at ``engine``'s first connection (before any connection is handed out)."""
    pool = engine.sync_engine.pool
    _POOLS[pool] = detected

    def first_connect(dbapi_connection: Any, _record: object) -> None:
        conn = cast("asyncpg.Connection", dbapi_connection.driver_connection)
        try:
            await_only(detected.ask(conn))
        except Exception as exc:  # the first call asks again (`fetch_for`)
            logger.debug("could not tell whether the database is Citus: %s", exc)

    event.listen(engine.sync_engine, "first_connect", first_connect)


def polls(pool: Pool) -> bool:
    """True when the provider on ``pool`` runs on Citus: its waiters poll."""
    detected = _POOLS.get(pool)
    return detected is not None and bool(detected.tables)
