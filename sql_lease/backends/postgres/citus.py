"""Citus: the same statements, sent as calls of the functions Citus runs on the key's worker.

On a database with the ``citus`` extension, migration 0008 distributes the leases table by
``key`` and makes every hot statement a plpgsql function (0006's names and signatures, bodies
that read the clock into a variable first: Citus refuses volatile functions in an ``UPDATE`` on
a distributed table); the one-key functions are distributed with the key as their argument, so
``SELECT * FROM f($1, ...)`` sent to the coordinator is delegated whole to the worker holding
that key (one round trip from here, its statements local there). This module detects Citus once
per provider (the first connection of a ``from_url`` engine; on a caller's engine, the first
call of its first connection) and then sends, instead of each catalogue text, its call, which
the provider's own catalogue carries (`Catalogue.distributed`, built by `citus_calls`).
A statement over many keys (a coalesced batch, ``renew_many``) goes as one delegated call per
worker (migration 0010's functions), its keys split by the worker holding their shard
(`shards`: the key's hash, computed here, and the placements read at detection and again
every `REFRESH_S` seconds before such a call); without placements, as 0008's batch function
(run on the coordinator, one delegated statement per key). Counting leases and metadata go as
migration 0011's one-key functions (delegated like the others); an all-or-none call over many
keys as 0011's coordinator function (its rows locked in key order, one distributed transaction).
Plain PostgreSQL is untouched: its connections get asyncpg's own ``fetch``, no wrapper.

Waiting: a release runs on a worker, so its NOTIFY reaches that worker's listeners, not the
coordinator's where the provider LISTENs. On Citus waiters poll instead (`polls`); the provider
logs that once (INFO on ``sql_lease.wait``).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterable
from time import monotonic
from typing import Any, Final, cast

import asyncpg
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import Pool, PoolProxiedConnection
from sqlalchemy.util import await_only

from ...catalogue import Catalogue, DistributedCall
from .. import CatalogueNow, Fetch
from .errors import PartlyApplied
from .shards import SHARDS_SQL, ShardMap

__all__ = [
    "DETECT_SQL",
    "DISTRIBUTED_SQL",
    "REFRESH_S",
    "SHARDS_SQL",
    "Detected",
    "Sent",
    "fetch_for",
    "key_groups",
    "polls",
    "watch",
]

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
#: Seconds after which the shards' placements are read again (before the next call over many
#: keys): a shard moved since costs a network hop inside the worker until then, nothing more.
REFRESH_S: Final = 30.0

Table = tuple[str, str]


class Detected:
    """One provider's answer: ``citus`` None until its first connection said whether the
    database is Citus; ``tables``, the distributed tables (schema, name); ``shards``, each hash-
    distributed table's shards and the worker of each (read at `REFRESH_S` intervals)."""

    __slots__ = ("__weakref__", "citus", "read_at", "shards", "tables")

    def __init__(self) -> None:
        self.citus: bool | None = None
        self.tables: frozenset[Table] = frozenset()
        self.shards: dict[Table, ShardMap] = {}
        self.read_at = 0.0

    async def ask(self, conn: asyncpg.Connection) -> None:
        """Ask ``conn``'s database (once per provider)."""
        citus = bool(await conn.fetchval(DETECT_SQL))
        if citus:
            self.learn(await conn.fetch(DISTRIBUTED_SQL), await conn.fetch(SHARDS_SQL))
        self.citus = citus

    async def read_shards(self, conn: asyncpg.Connection) -> None:
        """Read the shards' placements again."""
        self.learn_shards(await conn.fetch(SHARDS_SQL))

    def learn(self, tables: Iterable[Any], shards: Iterable[Any]) -> None:
        """The database is Citus: the rows of `DISTRIBUTED_SQL` and `SHARDS_SQL`."""
        self.tables = frozenset((s, t) for s, t in tables)
        self.learn_shards(shards)
        logger.info(
            "sql_lease: Citus detected: the statements of its distributed lease tables go as"
            " calls of the functions of migrations 0008, 0010 and 0011 (run on the worker holding"
            " each key)"
        )

    def learn_shards(self, rows: Iterable[Any]) -> None:
        """The rows of `SHARDS_SQL`: each hash-distributed table's shards and workers."""
        found: dict[Table, list[tuple[int, int, int]]] = {}
        for schema, table, low, high, group in rows:
            found.setdefault((schema, table), []).append((low, high, group))
        self.shards = {table: ShardMap(shards) for table, shards in found.items()}
        self.read_at = monotonic()

    def stale(self, args: tuple[Any, ...]) -> bool:
        """Whether the placements should be read again before a statement with ``args``
        (one over many keys, `REFRESH_S` after they were read)."""
        return bool(args) and isinstance(args[0], list) and monotonic() - self.read_at > REFRESH_S

    def call_for(self, catalogue: Catalogue, sql: str) -> str:
        """What goes to the coordinator for catalogue statement ``sql``: the call of its
        function when its table is distributed, else ``sql`` itself (reads over many keys, the
        clock: Citus takes them as they are)."""
        found = self._found(catalogue, sql)
        return sql if found is None else found.call

    def _found(self, catalogue: Catalogue, sql: str) -> DistributedCall | None:
        calls = catalogue.distributed
        if calls is None or (calls.schema, calls.table) not in self.tables:
            return None
        return calls.calls.get(sql)

    def plan(self, catalogue: Catalogue, sql: str, args: tuple[Any, ...]) -> list[Sent]:
        """The statements that run ``sql`` with ``args`` as Citus takes it (`call_for`; a
        statement over many keys as one call per worker; array arguments as their text):
        their rows together are ``sql``'s."""
        found = self._found(catalogue, sql)
        if found is None:
            return [(sql, args)]
        if found.worker_call is not None:
            calls = catalogue.distributed
            assert calls is not None  # `_found` found it there
            shards = self.shards.get((calls.schema, calls.table))
            if shards is not None:
                return _per_worker(found, shards, args)
        if found.arrays:
            args = tuple(_array_text(a) if n in found.arrays else a for n, a in enumerate(args))
        return [(found.call, args)]

    async def send(
        self, fetch: Fetch, catalogue: Catalogue, sql: str, args: tuple[Any, ...]
    ) -> list[Any]:
        """Run ``sql`` with ``args`` through ``fetch`` as `plan` says."""
        planned = self.plan(catalogue, sql, args)
        if len(planned) == 1:
            text, sent = planned[0]
            return await fetch(text, *sent)
        rows: list[Any] = []
        for n, (text, sent) in enumerate(planned):
            try:
                rows.extend(await fetch(text, *sent))
            except Exception as exc:
                if n == 0:
                    raise  # nothing ran: as the statement's own failure
                raise PartlyApplied(n, len(planned)) from exc
        return rows


#: A statement to send: its text and arguments.
Sent = tuple[str, tuple[Any, ...]]


def _per_worker(found: DistributedCall, shards: ShardMap, args: tuple[Any, ...]) -> list[Sent]:
    """One delegated call per worker holding some of the keys (its keys' share of every
    array; the anchor, its first key)."""
    assert found.worker_call is not None
    shares: dict[int | None, dict[int, list[int]]] = {}
    for group in found.spread:
        keys = args[group[0]]
        for i, key in enumerate(keys):
            worker = shards.group_of(bytes(key))
            shares.setdefault(worker, {}).setdefault(group[0], []).append(i)
    planned: list[Sent] = []
    for share in shares.values():
        part = list(args)
        anchor: bytes | None = None
        for group in found.spread:
            picked = share.get(group[0], [])
            for n in group:
                part[n] = [args[n][i] for i in picked]
            if anchor is None and picked:
                anchor = bytes(args[group[0]][picked[0]])
        sent = [anchor] + [
            _array_text(part[n]) if isinstance(part[n], list) else part[n]
            for n in found.worker_args
        ]
        planned.append((found.worker_call, tuple(sent)))
    return planned


def _array_text(values: list[Any]) -> str:
    """An array's text form: of ``bytes`` (hex, quoted) or of integers."""
    if values and isinstance(values[0], bytes | bytearray | memoryview):
        return "{" + ",".join(f'"\\\\x{bytes(v).hex()}"' for v in values) + "}"
    return "{" + ",".join(str(int(v)) for v in values) + "}"


def fetch_for(fairy: PoolProxiedConnection, detected: Detected, catalogue: CatalogueNow) -> Fetch:
    """The fetch of one asyncpg connection: asyncpg's own when the database is known not to be
    Citus; the calls of the provider's ``catalogue`` when it is; until then, one that asks
    first (a caller's engine)."""
    conn = cast("asyncpg.Connection", fairy.driver_connection)
    if detected.citus is False:
        return conn.fetch
    plain = conn.fetch
    if detected.citus:
        send = detected.send

        async def citus_fetch(sql: str, *args: Any) -> list[Any]:
            if detected.stale(args):
                await detected.read_shards(conn)
            return await send(plain, catalogue(), sql, args)

        return citus_fetch
    pool = getattr(fairy, "_pool", None)  # SQLAlchemy's fairy keeps its pool there

    async def asking_fetch(sql: str, *args: Any) -> list[Any]:
        if detected.citus is None:
            await detected.ask(conn)
            if isinstance(pool, Pool):
                _POOLS[pool] = detected
        if detected.citus:
            return await detected.send(plain, catalogue(), sql, args)
        return await plain(sql, *args)

    return asking_fetch


#: The answer of each pool a provider runs on (`polls`).
_POOLS: weakref.WeakKeyDictionary[Pool, Detected] = weakref.WeakKeyDictionary()


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


def key_groups(pool: Pool, catalogue: Catalogue, keys: list[bytes]) -> list[list[int]] | None:
    """On Citus, the indexes of ``keys`` by the worker holding them (their batch's calls go
    as one statement per worker, each atomic on its own); None elsewhere."""
    detected = _POOLS.get(pool)
    calls = catalogue.distributed
    if detected is None or not detected.tables or calls is None:
        return None
    shards = detected.shards.get((calls.schema, calls.table))
    return None if shards is None else shards.split(keys)


def polls(pool: Pool) -> bool:
    """True when the provider on ``pool`` runs on Citus: its waiters poll."""
    detected = _POOLS.get(pool)
    return detected is not None and bool(detected.tables)
