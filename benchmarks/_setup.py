"""Scratch database, bulk fills, sizes and server facts (everything outside the timed calls)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import subprocess
import sys
from collections.abc import AsyncIterator
from importlib import metadata
from pathlib import Path
from typing import Any

import asyncpg
import redis.asyncio as aioredis
from redis.utils import HIREDIS_AVAILABLE
from sqlalchemy.engine import make_url

from sql_lease import migrate
from sql_lease.backends.postgres.catalogue import build_catalogue, quote_ident
from sql_lease.schema import fence_sequence_name

__all__ = [
    "aof_everysec",
    "delete_redis_prefix",
    "drop_database",
    "environment_facts",
    "fill_pg",
    "fill_redis",
    "hot_update_stats",
    "migrate_tables",
    "recreate_database",
    "redact",
    "scratch_dsns",
    "table_size",
    "vacuum_analyze",
]


def scratch_dsns(pg_url: str, db_name: str) -> tuple[str, str]:
    """(server DSN as given, DSN of the scratch database), both plain ``postgresql://``."""
    url = make_url(pg_url).set(drivername="postgresql")
    admin = url.render_as_string(hide_password=False)
    scratch = url.set(database=db_name).render_as_string(hide_password=False)
    return admin, scratch


def redact(dsn: str) -> str:
    return make_url(dsn).render_as_string(hide_password=True)


async def recreate_database(admin_dsn: str, name: str) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {quote_ident(name)} WITH (FORCE)")
        await conn.execute(f"CREATE DATABASE {quote_ident(name)}")
    finally:
        await conn.close()


async def drop_database(admin_dsn: str, name: str) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {quote_ident(name)} WITH (FORCE)")
    finally:
        await conn.close()


async def migrate_tables(scratch_dsn: str, tables: list[str]) -> None:
    """Apply the library's own migrations (`sql_lease.migrate`) once per table name."""
    for table in tables:
        await migrate.upgrade_async(scratch_dsn, table_name=table)


async def fill_pg(
    conn: asyncpg.Connection,
    table: str,
    prefix: str,
    first: int,
    last: int,
    owner: str,
    ttl_ms: int,
) -> None:
    """Make ``owner`` hold ``prefix<first..last>`` in ``table`` (INSERT ... generate_series)."""
    t = build_catalogue(table).table
    seq = quote_ident(fence_sequence_name(table))
    await conn.execute(
        f"INSERT INTO {t} (key, owner, fence, expires_at, acquired_at)"
        " SELECT convert_to($1 || g, 'UTF8'), convert_to($2, 'UTF8'),"
        f" nextval('{seq}'), clock_timestamp() + $3::bigint * interval '1 millisecond',"
        " clock_timestamp() FROM generate_series($4::int, $5::int) AS g"
        " ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at",
        prefix,
        owner,
        ttl_ms,
        first,
        last,
    )


async def vacuum_analyze(conn: asyncpg.Connection, table: str) -> None:
    await conn.execute(f"VACUUM ANALYZE {build_catalogue(table).table}")


async def table_size(conn: asyncpg.Connection, table: str) -> int:
    """Table + indexes + TOAST, in bytes."""
    size: int = await conn.fetchval(
        "SELECT pg_total_relation_size($1::regclass)", build_catalogue(table).table
    )
    return size


async def hot_update_stats(conn: asyncpg.Connection, table: str) -> dict[str, int]:
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    row = await conn.fetchrow(
        "SELECT n_tup_upd, n_tup_hot_upd, n_live_tup, n_dead_tup, pg_table_size(relid) AS"
        " table_bytes, pg_indexes_size(relid) AS index_bytes FROM pg_stat_user_tables"
        " WHERE relid = $1::regclass",
        build_catalogue(table).table,
    )
    return dict(row) if row else {}


_FILL_LUA = """
for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
  redis.call('SET', KEYS[1] .. i, ARGV[3], 'PX', ARGV[4])
end
return 1
"""


async def fill_redis(
    client: aioredis.Redis, prefix: str, first: int, last: int, owner: str, ttl_ms: int
) -> None:
    """SET ``prefix<first..last>`` = owner PX ttl, 50,000 keys per script call."""
    script = client.register_script(_FILL_LUA)
    step = 50_000
    for start in range(first, last + 1, step):
        end = min(last, start + step - 1)
        await script(keys=[prefix], args=[start, end, owner, ttl_ms])


async def delete_redis_prefix(client: aioredis.Redis, prefix: str) -> int:
    deleted = 0
    batch: list[bytes] = []
    async for key in client.scan_iter(match=prefix + "*", count=10_000):
        batch.append(key)
        if len(batch) >= 10_000:
            deleted += await client.unlink(*batch)
            batch.clear()
    if batch:
        deleted += await client.unlink(*batch)
    return deleted


@contextlib.asynccontextmanager
async def aof_everysec(client: aioredis.Redis) -> AsyncIterator[dict[str, Any]]:
    """Run the block with ``appendonly yes, appendfsync everysec``; restore the old settings."""
    before = {
        **(await client.config_get("appendonly")),
        **(await client.config_get("appendfsync")),
    }
    state: dict[str, Any] = {"before": before, "during": None, "error": None}
    try:
        await client.config_set("appendfsync", "everysec")
        await client.config_set("appendonly", "yes")
        for _ in range(600):  # the switch starts a background rewrite; wait for it
            info = await client.info("persistence")
            busy = info.get("aof_rewrite_in_progress") or info.get("aof_rewrite_scheduled")
            if info.get("aof_enabled") == 1 and not busy:
                break
            await asyncio.sleep(0.05)
        state["during"] = {
            **(await client.config_get("appendonly")),
            **(await client.config_get("appendfsync")),
        }
    except aioredis.RedisError as exc:
        state["error"] = f"could not enable AOF: {exc}"
    try:
        yield state
    finally:
        for name in ("appendonly", "appendfsync"):
            if name in before:
                await client.config_set(name, str(before[name]))


def _git_state() -> str:
    """The checkout's commit, and whether the library's files differ from it."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "sql_lease", "migrations"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" + uncommitted library changes" if dirty else "")


async def environment_facts(conn: asyncpg.Connection, client: aioredis.Redis) -> dict[str, Any]:
    settings = {}
    for name in (
        "server_version",
        "synchronous_commit",
        "fsync",
        "wal_sync_method",
        "autovacuum",
        "shared_buffers",
        "max_connections",
    ):
        settings[name] = await conn.fetchval(f"SHOW {name}")
    info = await client.info("server")
    persistence = {
        **(await client.config_get("appendonly")),
        **(await client.config_get("appendfsync")),
        **(await client.config_get("save")),
    }

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "missing"

    return {
        "sql_lease_git": _git_state(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_start": list(os.getloadavg()),
        "packages": {
            d: version(d) for d in ("sql-lease", "asyncpg", "sqlalchemy", "redis", "hiredis")
        },
        "hiredis": HIREDIS_AVAILABLE,
        "postgresql": settings,
        "redis": {"version": info.get("redis_version"), **persistence},
    }
