"""Revision 0008 (Citus) on a plain PostgreSQL: nothing changes, up or down, and the provider
runs on asyncpg's own fetch (Citus is detected once, at the first connection: not here)."""

from __future__ import annotations

from collections.abc import Callable

import asyncpg
import psycopg

from sql_lease import SqlLeaseProvider, migrate


def _snapshot(url: str) -> tuple[list[tuple[str, str]], list[str], str]:
    """Every function of the schema with its body, every trigger, the revision."""
    with psycopg.connect(url.replace("+asyncpg", ""), autocommit=True) as conn:
        functions = conn.execute(
            "SELECT p.oid::regprocedure::text, p.prosrc FROM pg_proc p"
            " JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'"
            " ORDER BY 1"
        ).fetchall()
        triggers = conn.execute(
            "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1"
        ).fetchall()
        version = conn.execute("SELECT version_num FROM leases_alembic_version").fetchone()
    assert version is not None
    return [(f, s) for f, s in functions], [t for (t,) in triggers], str(version[0])


def test_plain_postgres_is_unaffected(make_database: Callable[[], str]) -> None:
    url = make_database()
    migrate.upgrade(url, "0006")
    functions, triggers, _ = _snapshot(url)
    assert "leases_fence_timeline_insert" in triggers
    migrate.upgrade(url, "0008")
    assert _snapshot(url) == (functions, triggers, "0008")
    migrate.downgrade(url, "0006")
    assert _snapshot(url) == (functions, triggers, "0006")


async def test_plain_postgres_gets_asyncpg_s_own_fetch(database_url: str) -> None:
    provider = SqlLeaseProvider.from_url(database_url, timeout=10)
    try:
        await provider.get_lease("k")
        pair = provider._connections.take()
        assert pair is not None
        fetch = pair[1]
        assert getattr(fetch, "__func__", None) is asyncpg.Connection.fetch
        await provider._connections.put(*pair)
    finally:
        await provider.aclose()
