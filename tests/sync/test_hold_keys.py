"""A hold of several keys on the sync providers (``with provider.hold([...], owner, ttl)``):
all or none, renewed together, lost as a whole, released on exit; bad keys refused before
any I/O. The async counterpart is tests/contract/test_hold_keys.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sql_lease import LeaseAlreadyHeld, LeaseLost, LeaseNotAcquired
from sql_lease.sync import HeldLeases

from .conftest import _sync_provider

LONG = 30_000
KEYS = ["k:b", "k:a", "k:c"]


@pytest.fixture(params=["memory", "postgresql", "sqlite", "pgbouncer", "mariadb"])
def provider(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A sync provider that has ``acquire_leases``, on an empty table."""
    p = _sync_provider(request, request.param)
    yield p
    p.close()


def owners(provider: Any, keys: list[str]) -> list[str | None]:
    return [provider.get_lease_owner(key) for key in keys]


def test_hold_of_several_keys_takes_all_renews_them_and_releases_all(provider: Any) -> None:
    with provider.hold(KEYS, "me", 300) as held:
        assert isinstance(held, HeldLeases)
        assert held.keys == tuple(KEYS) and held.held
        fences = held.fences
        assert set(fences) == set(KEYS) and all(isinstance(f, int) for f in fences.values())
        time.sleep(0.8)  # past the TTL: only renewals keep them
        assert owners(provider, KEYS) == ["me"] * 3
        for key in KEYS:
            assert provider.get_lease(key).fence == fences[key]
        assert all(h.renewals > 0 for h in held.holds.values())
        held.check()
    assert not held.held and not held.lost.is_set()
    assert owners(provider, KEYS) == [None] * 3


def test_one_key_taken_takes_none_and_names_it(provider: Any) -> None:
    provider.acquire_lease("k:c", "other", LONG)
    with pytest.raises(LeaseNotAcquired) as caught, provider.hold(KEYS, "me", LONG):
        pytest.fail("entered")
    assert (caught.value.key, caught.value.holder) == ("k:c", "other")
    assert owners(provider, KEYS) == [None, None, "other"]


def test_wait_ms_waits_for_all_keys(provider: Any) -> None:
    provider.acquire_lease("k:a", "x", LONG)
    provider.acquire_lease("k:c", "y", LONG)

    def free_later() -> None:
        time.sleep(0.3)
        provider.release_lease("k:a", "x")
        time.sleep(0.3)
        provider.release_lease("k:c", "y")

    freeing = threading.Thread(target=free_later)
    freeing.start()
    try:
        with provider.hold(KEYS, "me", LONG, wait_ms=20_000) as held:
            assert held.held and owners(provider, KEYS) == ["me"] * 3
    finally:
        freeing.join()


def test_wait_ms_runs_out_and_takes_none(provider: Any) -> None:
    provider.acquire_lease("k:b", "x", LONG)
    with pytest.raises(LeaseNotAcquired), provider.hold(KEYS, "me", LONG, wait_ms=300):
        pytest.fail("entered")
    assert owners(provider, KEYS) == ["x", None, None]


def test_losing_one_key_loses_the_whole_hold(provider: Any) -> None:
    hold = provider.hold(KEYS, "me", 300)

    def body() -> None:
        with hold:
            assert provider.force_release("k:a")
            provider.acquire_lease("k:a", "thief", LONG)
            assert hold.lost.wait(10)  # the renewal thread finds it gone
            with pytest.raises(LeaseLost):
                hold.check()

    with pytest.raises(LeaseLost) as caught:
        body()
    assert caught.value.key == "k:a"
    assert hold.lost_reason is not None and "'k:a'" in hold.lost_reason
    assert owners(provider, KEYS) == [None, "thief", None]


def test_a_key_held_by_another_hold_of_the_owner_is_refused(provider: Any) -> None:
    with provider.hold("k:a", "me", LONG) as one:
        with pytest.raises(LeaseAlreadyHeld), provider.hold(KEYS, "me", LONG):
            pytest.fail("entered")
        assert one.held and owners(provider, KEYS) == [None, "me", None]
    assert owners(provider, KEYS) == [None] * 3


@pytest.mark.parametrize(
    ("keys", "kwargs", "exc"),
    [
        ([], {}, ValueError),
        (("a", "a"), {}, ValueError),
        (["a", 5], {}, TypeError),
        (["a", ""], {}, ValueError),
        (["a", "b"], {"limit": 2}, ValueError),
        (["a", "b"], {"renew_every_ms": 0}, ValueError),
        (["a", "b"], {"on_lost": 3}, TypeError),
        (["a", "b"], {"nonsense": 1}, TypeError),
        ({"a", "b"}, {}, TypeError),  # a set: not a list or tuple, not a key
    ],
)
def test_bad_keys_or_options_are_refused_before_any_change(
    provider: Any, keys: Any, kwargs: dict[str, Any], exc: type[Exception]
) -> None:
    with pytest.raises(exc):
        provider.hold(keys, "me", LONG, **kwargs)
    assert owners(provider, ["a", "b"]) == [None, None]


def test_a_str_is_never_taken_as_several_keys(provider: Any) -> None:
    with pytest.raises(TypeError):
        HeldLeases(provider, None, "ab", "me", LONG)  # type: ignore[arg-type]
    with provider.hold("ab", "me", LONG) as one:  # through hold(): one key
        assert one.key == "ab"
