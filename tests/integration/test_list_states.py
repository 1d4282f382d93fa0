"""`SqlLeaseProvider.list_states`: what ``sql-lease top`` reads, on PostgreSQL and SQLite.

Live leases, leases ended within the window and wanted keys, in key order; ``prefix``,
``after`` and ``limit`` page as for ``list_leases``; a row another tool wrote with a key that
is not UTF-8 shows as its label, never raises; bad arguments fail before any I/O.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sql_lease import LeaseValueError, SqlLeaseProvider, migrate


@pytest.fixture(params=["postgresql", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    if request.param == "postgresql":
        return str(request.getfixturevalue("database_url"))
    found = f"sqlite:///{tmp_path_factory.mktemp('states') / 'leases.db'}"
    migrate.upgrade(found)
    return found


@pytest.fixture
async def provider(url: str) -> AsyncIterator[SqlLeaseProvider]:
    p = SqlLeaseProvider.from_url(url, timeout=10)
    yield p
    await p.aclose()


def write_foreign_row(url: str, key: bytes) -> None:
    """Another tool's live row whose key is not UTF-8."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            db.execute(
                "INSERT INTO leases (key, owner, fence, expires_at, acquired_at) VALUES "
                "(?, ?, 999999, strftime('%Y-%m-%d %H:%M:%f', 'now', '+60 seconds'), "
                "strftime('%Y-%m-%d %H:%M:%f', 'now'))",
                (key, b"tool"),
            )
        return
    u = make_url(url)
    with psycopg.connect(
        host=u.host, port=u.port, user=u.username, dbname=u.database, autocommit=True
    ) as pg:
        pg.execute(
            "INSERT INTO leases (key, owner, fence, expires_at, acquired_at) VALUES "
            "(%s, %s, 999999, clock_timestamp() + interval '60 seconds', clock_timestamp())",
            (key, b"tool"),
        )


async def test_live_recently_ended_and_wanted_rows_in_key_order(
    provider: SqlLeaseProvider,
) -> None:
    p = f"st{uuid.uuid4().hex[:8]}:"
    live = await provider.acquire_lease(p + "a", "w1", 60_000)
    await provider.acquire_lease(p + "b", "w2", 60_000)
    await provider.release_lease(p + "b", "w2")
    await provider.acquire_lease(p + "c", "w3", 60_000)
    assert await provider.mark_wanted(p + "c", 30_000) is not None
    await provider.acquire_lease(p + "old", "w4", 60_000)
    await provider.release_lease(p + "old", "w4")
    await asyncio.sleep(0.4)
    await provider.acquire_lease(p + "b2", "w5", 60_000)

    states = await provider.list_states(p, ended_within_ms=300)
    assert [s.key for s in states] == [p + "a", p + "b2", p + "c"]  # b and old ended earlier
    states = await provider.list_states(p, ended_within_ms=60_000)
    by_key = {s.key: s for s in states}
    assert list(by_key) == [p + "a", p + "b", p + "b2", p + "c", p + "old"]
    a, b, c = by_key[p + "a"], by_key[p + "b"], by_key[p + "c"]
    assert (a.owner, a.fence, a.live, a.wanted, a.wanted_until) == (
        "w1",
        live.fence,
        True,
        False,
        None,
    )
    assert (b.owner, b.live, b.wanted) == ("w2", False, False)
    assert c.live and c.wanted and c.wanted_until is not None and c.wanted_until > c.now
    assert all(s.now.tzinfo is not None and s.acquired_at <= s.now for s in states)


async def test_after_and_limit_page_through(provider: SqlLeaseProvider) -> None:
    p = f"pg{uuid.uuid4().hex[:8]}:"
    for i in range(5):
        await provider.acquire_lease(f"{p}{i}", "w", 60_000)
    first = await provider.list_states(p, limit=2)
    rest = await provider.list_states(p, limit=10, after=first[-1].key)
    assert [s.key for s in first + rest] == [f"{p}{i}" for i in range(5)]


async def test_a_foreign_row_shows_as_its_label(url: str, provider: SqlLeaseProvider) -> None:
    key = b"fr" + uuid.uuid4().hex[:6].encode() + b"\xff"
    write_foreign_row(url, key)
    [state] = await provider.list_states(key[:8].decode())
    assert (state.key, state.owner, state.live) == ("\\x" + key.hex(), "tool", True)


async def test_bad_arguments_fail_before_any_io(provider: SqlLeaseProvider) -> None:
    with pytest.raises(LeaseValueError):
        await provider.list_states(limit=0)
    with pytest.raises(LeaseValueError):
        await provider.list_states(ended_within_ms=-1)
