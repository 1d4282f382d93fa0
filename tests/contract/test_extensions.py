"""Extensions beyond the five contract methods, for every provider that offers them."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

LONG = 30_000
SHORT = 150


async def test_renew_leases_answers_per_item_in_order(provider: Any) -> None:
    await provider.acquire_lease("a", "o1", 2_000)
    await provider.acquire_lease("b", "o2", 2_000)
    await provider.acquire_lease("gone", "o1", SHORT)
    await asyncio.sleep(0.3)
    items = [("a", "o1"), ("b", "o1"), ("gone", "o1"), ("absent", "o1"), ("b", "o2"), ("a", "o1")]
    assert await provider.renew_leases(items, LONG) == [True, False, False, False, True, True]
    assert (await provider.get_lease("a")).expires_at > (await provider.get_lease("b")).acquired_at
    assert await provider.get_lease_owner("gone") is None
    assert await provider.renew_leases([], LONG) == []


async def test_renew_leases_accepts_any_iterable_of_pairs(provider: Any) -> None:
    await provider.acquire_lease("k\0x", "o", 2_000)
    assert await provider.renew_leases((p for p in [("k\0x", "o")]), LONG) == [True]


@pytest.mark.parametrize(
    ("items", "exc"),
    [
        ("ab", TypeError),
        (None, TypeError),
        ([("a",)], TypeError),
        ([("a", "b", "c")], TypeError),
        (["ab"], TypeError),
        ([("", "o")], ValueError),
        ([("k", 3)], TypeError),
    ],
)
async def test_renew_leases_rejects_bad_items_before_any_change(
    provider: Any, items: object, exc: type[Exception]
) -> None:
    held = await provider.acquire_lease("k", "o", 2_000)
    with pytest.raises(exc):
        await provider.renew_leases(
            [("k", "o"), *items] if isinstance(items, list) else items, LONG
        )
    assert (await provider.get_lease("k")).expires_at == held.expires_at


async def test_force_release_ends_anyones_lease_and_logs_it(
    provider: Any, caplog: pytest.LogCaptureFixture
) -> None:
    held = await provider.acquire_lease("k", "stuck", LONG)
    with caplog.at_level(logging.WARNING, logger="sql_lease"):
        assert await provider.force_release("k") is True
    assert "stuck" in caplog.text
    assert await provider.get_lease_owner("k") is None
    assert await provider.force_release("k") is False
    assert await provider.renew_lease("k", "stuck", LONG) is False
    again = await provider.acquire_lease("k", "next", LONG)
    assert again.fence > held.fence


async def test_list_leases_shows_live_leases_by_prefix_in_key_order(provider: Any) -> None:
    for key in ["t\0b", "t\0a", "t\0\xff", "u", "t", "t\0c"]:
        await provider.acquire_lease(key, f"o-{key}", LONG)
    await provider.acquire_lease("t\0dead", "o", SHORT)
    await asyncio.sleep(0.3)
    everything = await provider.list_leases()
    assert [lease.key for lease in everything] == ["t", "t\0a", "t\0b", "t\0c", "t\0\xff", "u"]
    assert [lease.key for lease in await provider.list_leases("t\0")] == [
        "t\0a",
        "t\0b",
        "t\0c",
        "t\0\xff",
    ]
    assert [lease.owner for lease in await provider.list_leases("u")] == ["o-u"]
    page = await provider.list_leases("t\0", limit=2)
    assert [lease.key for lease in page] == ["t\0a", "t\0b"]
    rest = await provider.list_leases("t\0", limit=2, after=page[-1].key)
    assert [lease.key for lease in rest] == ["t\0c", "t\0\xff"]
    assert await provider.list_leases("zzz") == []


@pytest.mark.parametrize(
    ("limit", "exc"), [(0, ValueError), (10_001, ValueError), (1.5, TypeError)]
)
async def test_list_leases_validates_its_limit(provider: Any, limit: object, exc: type) -> None:
    with pytest.raises(exc):
        await provider.list_leases(limit=limit)


async def test_purge_expired_removes_only_long_expired_rows(provider: Any) -> None:
    await provider.acquire_lease("live", "o", LONG)
    for i in range(5):
        await provider.acquire_lease(f"old{i}", "o", 1)
    await asyncio.sleep(0.05)
    assert await provider.purge_expired(min_age_ms=60_000) == 0
    await asyncio.sleep(0.2)
    assert await provider.purge_expired(min_age_ms=100, batch_size=2) == 5
    assert await provider.get_lease_owner("live") == "o"
    assert await provider.purge_expired(min_age_ms=0) == 0
