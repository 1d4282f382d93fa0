"""The sync `hold()` compares the fence each renewal reports with the fence it was granted.

As in tests/contract/test_hold_fence.py: the row's fence is changed behind the hold's back
(the older row a lossy failover leaves on the new primary); the renewal that reports it loses
the lease (``lost`` set, ``on_lost`` called, `LeaseLost` on exit). A provider whose renewal
reports no fence keeps holding.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, make_url, text

from sql_lease import AcquireResult
from sql_lease.sync import HeldLease, InMemoryLeaseProvider, LeaseLost, SqlLeaseProvider

from ._events import eventually

TTL = 3_000
EVERY = 100


@pytest.fixture(params=["postgresql", "sqlite"])
def sql(request: pytest.FixtureRequest) -> Iterator[tuple[SqlLeaseProvider, str]]:
    name = {"postgresql": "database_url", "sqlite": "sqlite_url"}[request.param]
    url: str = request.getfixturevalue(name)
    provider = SqlLeaseProvider.from_url(url, timeout=10)
    wipe = "DELETE FROM leases" if request.param == "sqlite" else "TRUNCATE leases"
    provider.executor.run("setup", True, wipe, (), 10)
    yield provider, url
    provider.close()


def _move_fence(url: str, key: str, fence: int) -> int:
    other = fence - 1 if fence > 1 else fence + 1
    parsed = make_url(url)
    if parsed.drivername.startswith("postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    engine = create_engine(parsed)
    try:
        with engine.begin() as conn:
            done = conn.execute(
                text("UPDATE leases SET fence = :f WHERE key = :k"),
                {"f": other, "k": key.encode()},
            )
            assert done.rowcount == 1
    finally:
        engine.dispose()
    return other


def test_a_renewal_with_another_fence_loses_the_hold(sql: tuple[SqlLeaseProvider, str]) -> None:
    provider, url = sql
    hooked = threading.Event()
    lease = provider.hold("fenced", "me", TTL, renew_every_ms=EVERY, on_lost=lambda _: hooked.set())
    moved: list[int] = []

    def body() -> None:
        with lease:
            assert lease.fence is not None
            eventually(lambda: lease.renewals >= 1, "a first renewal")
            moved.append(_move_fence(url, "fenced", lease.fence))
            assert lease.wait_lost(30)

    with pytest.raises(LeaseLost) as info:  # leaving the block raises it
        body()
    granted, other = lease.fence, moved[0]
    assert info.value.fence == granted
    assert lease.lost_reason is not None and f"fence {other}, not {granted}" in lease.lost_reason
    assert hooked.is_set() and not lease.held
    assert len(provider.renewer) == 0


def test_renewals_that_keep_the_fence_keep_the_hold(sql: tuple[SqlLeaseProvider, str]) -> None:
    provider, _ = sql
    with provider.hold("steady", "me", TTL, renew_every_ms=EVERY) as lease:
        eventually(lambda: lease.renewals >= 3, "three renewals")
        assert lease.held and not lease.lost.is_set()


class _BoolOnly:
    """A foreign sync provider: the five contract methods, renewal answering only a bool."""

    def __init__(self) -> None:
        self.inner = InMemoryLeaseProvider()

    def acquire_lease(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        return self.inner.acquire_lease(key, owner, ttl_ms)

    def get_lease_owner(self, key: str) -> str | None:
        return self.inner.get_lease_owner(key)

    def release_lease(self, key: str, owner: str) -> None:
        self.inner.release_lease(key, owner)

    def renew_lease(self, key: str, owner: str, ttl_ms: int) -> bool:
        return self.inner.renew_lease(key, owner, ttl_ms)

    def transfer_lease(self, key: str, from_owner: str, to_owner: str, ttl_ms: int) -> bool:
        return self.inner.transfer_lease(key, from_owner, to_owner, ttl_ms)


def test_a_provider_whose_renewal_reports_no_fence_keeps_holding() -> None:
    from sql_lease.sync._runtime import Lifecycle

    provider = _BoolOnly()
    life = Lifecycle(provider)
    with HeldLease(provider, life, "k", "me", TTL, renew_every_ms=EVERY) as lease:
        eventually(lambda: lease.renewals >= 3, "three renewals")
        assert lease.held
    assert provider.get_lease_owner("k") is None
    assert life.renewer.statements >= 3
    life.close()
    provider.inner.close()
