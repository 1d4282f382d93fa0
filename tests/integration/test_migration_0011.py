"""Revision 0011 (Citus: the counting functions) on a plain PostgreSQL: nothing changes, up or
down, and counting leases keep working on 0009's statements."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from sql_lease import SqlLeaseProvider, migrate

from .test_migration_0008 import _snapshot


def test_plain_postgres_is_unaffected_by_0011(make_database: Callable[[], str]) -> None:
    url = make_database()
    migrate.upgrade(url, "0010")
    functions, triggers, _ = _snapshot(url)
    migrate.upgrade(url, "0011")
    assert _snapshot(url) == (functions, triggers, "0011")
    assert not [f for f, _ in functions if "count" in f]
    assert asyncio.run(_three_of_limit_2(url)) == [True, True, False]
    migrate.downgrade(url, "0010")
    assert _snapshot(url) == (functions, triggers, "0010")
    migrate.upgrade(url, "0011")  # and up again
    assert _snapshot(url) == (functions, triggers, "0011")


async def _three_of_limit_2(url: str) -> list[bool]:
    provider = SqlLeaseProvider.from_url(url)
    try:
        got = [await provider.acquire_lease("k", o, 60_000, limit=2) for o in ("a", "b", "c")]
        return [r.acquired for r in got]
    finally:
        await provider.aclose()
