"""The sync provider speaks the async provider's API: the same names (`mark_wanted`, never
`want`) and the same result types (`Released`, `Renewal`, `Holder`), in database time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sql_lease import Holder, Released, Renewal
from sql_lease import SqlLeaseProvider as AsyncSqlLeaseProvider
from sql_lease.sync import SqlLeaseProvider

from .conftest import _sync_provider


def test_the_sync_provider_marks_wanted_under_the_async_name() -> None:
    assert callable(SqlLeaseProvider.mark_wanted)
    assert callable(AsyncSqlLeaseProvider.mark_wanted)
    assert not hasattr(SqlLeaseProvider, "want")


@pytest.fixture(params=["postgresql", "sqlite", "pgbouncer"])
def sql_provider(request: pytest.FixtureRequest) -> Iterator[Any]:
    provider = _sync_provider(request, request.param)
    yield provider
    provider.close()


def test_reporting_forms_return_the_async_result_types(sql_provider: Any) -> None:
    p = sql_provider
    granted = p.acquire_lease("k", "a", 30_000)
    assert granted.acquired
    holder = p.mark_wanted("k", 1_000)
    assert isinstance(holder, Holder)
    assert (holder.owner, holder.fence) == ("a", granted.fence)
    renewed = p.renew("k", "a", 30_000)
    assert isinstance(renewed, Renewal) and renewed.fence == granted.fence
    moved = p.transfer("k", "a", "b", 30_000)
    assert isinstance(moved, Renewal) and moved.fence > granted.fence
    released = p.release("k", "b")
    assert isinstance(released, Released) and released.fence == moved.fence
    assert released.released_at.tzinfo is not None
    assert p.release("k", "b") is None
    assert p.renew("k", "a", 30_000) is None
    assert p.mark_wanted("k", 1_000) is None
