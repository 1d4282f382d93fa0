"""Counting leases, metadata and all-or-none calls on the sync providers.

The async suite's cases (tests/contract/test_counting.py), case for case, through `AsyncView`
on memory, PostgreSQL, SQLite, PostgreSQL behind PgBouncer (``pooler="transaction"``) and
MariaDB, each case on the five at once; the case that needs ``async with provider.hold`` has a
sync counterpart here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sql_lease import LeaseLimitMismatchError
from tests.contract import test_counting as cases

from .conftest import _sync_provider
from .test_contract import on_every_backend

COUNTING = frozenset({"memory", "postgresql", "sqlite", "pgbouncer", "mariadb"})
LONG = 30_000

for _name, _case in vars(cases).items():
    if _name.startswith("test_") and _name != "test_hold_keeps_a_slot_renewed_and_releases_it":
        globals()[_name] = on_every_backend(_case, backends=COUNTING)


@pytest.fixture(params=sorted(COUNTING))
def counting_provider(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A sync provider that has counting leases, on an empty table."""
    provider = _sync_provider(request, request.param)
    yield provider
    provider.close()


@pytest.fixture(params=sorted(COUNTING - {"memory"}))
def sql_counting_provider(request: pytest.FixtureRequest) -> Iterator[Any]:
    """As `counting_provider`, the SQL ones (which have the reporting forms)."""
    provider = _sync_provider(request, request.param)
    yield provider
    provider.close()


def test_hold_keeps_a_slot_renewed_and_releases_it(counting_provider: Any) -> None:
    p = counting_provider
    p.acquire_lease("sem", "other", LONG, limit=2)
    with p.hold("sem", "me", 300, limit=2) as held:
        assert held.fence is not None
        time.sleep(0.8)  # past the TTL: only renewals keep it
        holders = {h.owner: h for h in p.get_lease_holders("sem")}
        assert set(holders) == {"other", "me"} and holders["me"].fence == held.fence
        assert held.renewals > 0 and not held.lost.is_set()
    assert [h.owner for h in p.get_lease_holders("sem")] == ["other"]


def test_hold_of_a_full_counting_key_waits_for_a_released_slot(counting_provider: Any) -> None:
    p = counting_provider
    p.acquire_lease("sem", "a", LONG, limit=1, metadata="m")
    timer = threading.Timer(0.3, p.release_lease, ("sem", "a"))
    timer.start()
    try:
        with p.hold("sem", "me", LONG, limit=1, wait_ms=20_000) as held:
            assert [h.owner for h in p.get_lease_holders("sem")] == ["me"]
            assert held.fence is not None
    finally:
        timer.join()
    assert p.get_lease_holders("sem") == []


def test_hold_with_another_limit_is_refused_and_holds_nothing(counting_provider: Any) -> None:
    p = counting_provider
    p.acquire_lease("sem", "a", LONG, limit=3)
    with pytest.raises(LeaseLimitMismatchError), p.hold("sem", "me", LONG, limit=2):
        pass
    assert [h.owner for h in p.get_lease_holders("sem")] == ["a"]


def test_the_reporting_forms_see_grants_of_counting_keys(sql_counting_provider: Any) -> None:
    p = sql_counting_provider
    granted = p.acquire_lease("sem", "a", LONG, limit=2)
    renewal = p.renew("sem", "a", LONG)
    assert renewal is not None and renewal.fence == granted.fence
    assert p.transfer_lease("sem", "a", "b", LONG)
    [moved] = p.get_lease_holders("sem")
    assert moved.owner == "b" and moved.fence > granted.fence
    reported = p.transfer("sem", "b", "c", LONG)
    [handed] = p.get_lease_holders("sem")
    assert reported is not None and handed.owner == "c" and reported.fence == handed.fence
    assert reported.fence > moved.fence
    assert p.transfer("sem", "b", "d", LONG) is None  # b holds nothing now
    released = p.release("sem", "c")
    assert released is not None and released.fence == handed.fence
    assert p.release("sem", "c") is None


def test_list_leases_shows_each_grant_with_its_metadata(counting_provider: Any) -> None:
    p = counting_provider
    p.acquire_lease("k:plain", "p", LONG)
    p.acquire_lease("k:sem", "a", LONG, limit=2, metadata="ma")
    p.acquire_lease("k:sem", "b", LONG, limit=2)
    listed = [(x.key, x.owner, x.metadata) for x in p.list_leases("k:")]
    assert listed == [("k:plain", "p", None), ("k:sem", "a", "ma"), ("k:sem", "b", None)]


def test_renew_leases_renews_grants_and_plain_leases_alike(counting_provider: Any) -> None:
    p = counting_provider
    p.acquire_lease("plain", "a", LONG)
    p.acquire_lease("sem", "a", LONG, limit=2)
    assert p.renew_leases([("plain", "a"), ("sem", "a"), ("sem", "x"), ("sem", "a")], LONG) == [
        True,
        True,
        False,
        True,
    ]
