"""SPEC §4: a bad argument is rejected before any I/O, with the stated type, changing nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sql_lease import LeaseError, NoopLeaseProvider, SqlLeaseProvider

LONG = 30_000
GOOD = {"key": "k", "owner": "o", "from_owner": "o", "to_owner": "p", "ttl_ms": LONG}
METHODS: dict[str, tuple[str, ...]] = {
    "acquire_lease": ("key", "owner", "ttl_ms"),
    "get_lease_owner": ("key",),
    "get_lease": ("key",),
    "release_lease": ("key", "owner"),
    "renew_lease": ("key", "owner", "ttl_ms"),
    "transfer_lease": ("key", "from_owner", "to_owner", "ttl_ms"),
}
NAME_TYPE_ERRORS = [None, 1, 1.5, b"k", ["k"], object()]
NAME_VALUE_ERRORS = ["", "x" * 1025, "\u00e9" * 513]
TTL_TYPE_ERRORS = [None, True, False, 1.0, 1000.0, "1000", b"1", [1]]
TTL_VALUE_ERRORS = [0, -1, -LONG, 365 * 24 * 3600 * 1000 + 1, 10**30]


def cases() -> list[Any]:
    out = []
    for method, params in METHODS.items():
        for param in params:
            if param == "ttl_ms":
                bad = [(v, TypeError) for v in TTL_TYPE_ERRORS]
                bad += [(v, ValueError) for v in TTL_VALUE_ERRORS]
            else:
                bad = [(v, TypeError) for v in NAME_TYPE_ERRORS]
                bad += [(v, ValueError) for v in NAME_VALUE_ERRORS]
            for value, exc in bad:
                name = f"{method}-{param}-{value!r:.20}"
                out.append(pytest.param(method, param, value, exc, id=name))
    return out


def call(provider: Any, method: str, param: str, value: object) -> Callable[[], Awaitable[Any]]:
    args = [value if p == param else GOOD[p] for p in METHODS[method]]
    return lambda: getattr(provider, method)(*args)


@pytest.mark.parametrize(("method", "param", "value", "exc"), cases())
async def test_bad_argument_is_rejected_and_changes_nothing(
    provider: Any, method: str, param: str, value: object, exc: type[Exception]
) -> None:
    held = await provider.acquire_lease("k", "o", LONG)
    with pytest.raises(exc) as info:
        await call(provider, method, param, value)()
    assert isinstance(info.value, LeaseError)
    assert param in str(info.value)
    lease = await provider.get_lease("k")
    assert (lease.owner, lease.fence, lease.expires_at) == ("o", held.fence, held.expires_at)


@pytest.mark.parametrize(("method", "param", "value", "exc"), cases()[::7])
async def test_bad_argument_is_rejected_before_any_io(
    method: str, param: str, value: object, exc: type[Exception]
) -> None:
    unreachable = SqlLeaseProvider.from_url(
        "postgresql://u:pw@127.0.0.1:1/none", timeout=1, connect_timeout=1
    )
    try:
        with pytest.raises(exc):
            await call(unreachable, method, param, value)()
    finally:
        await unreachable.aclose()


CONTRACT_CASES = [c for c in cases() if c.values[0] != "get_lease"]  # noop has no get_lease


@pytest.mark.parametrize(("method", "param", "value", "exc"), CONTRACT_CASES[::5])
async def test_noop_provider_validates_like_the_others(
    method: str, param: str, value: object, exc: type[Exception]
) -> None:
    with pytest.raises(exc):
        await call(NoopLeaseProvider(), method, param, value)()
