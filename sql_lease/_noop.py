"""The always-win fallback provider, for single-process behaviour."""

from __future__ import annotations

from typing import Final

from ._core.contract import AcquireResult, LeaseProvider, is_lease_provider
from ._core.validate import Millis, check_name, check_ttl

__all__ = ["NOOP_LEASE_PROVIDER", "NoopLeaseProvider", "lease_provider_or_noop"]


class NoopLeaseProvider:
    """Every caller wins its own race; release, renew and transfer are inert.

    Stateless: use the shared `NOOP_LEASE_PROVIDER` (``is NOOP_LEASE_PROVIDER`` tells a runtime
    that it can skip liveness checks). Arguments are still validated like every provider's.
    """

    __slots__ = ()

    async def acquire_lease(self, key: str, owner: str, ttl_ms: Millis) -> AcquireResult:
        """Always acquired by ``owner`` (no fence, no expiry: nothing is stored)."""
        check_name("key", key)
        check_name("owner", owner)
        check_ttl(ttl_ms)
        return AcquireResult(acquired=True, owner=owner)

    async def get_lease_owner(self, key: str) -> str | None:
        """Always None: nothing is stored."""
        check_name("key", key)
        return None

    async def release_lease(self, key: str, owner: str) -> None:
        """Does nothing."""
        check_name("key", key)
        check_name("owner", owner)

    async def renew_lease(self, key: str, owner: str, ttl_ms: Millis) -> bool:
        """Always True: the caller keeps its (imaginary) lease."""
        check_name("key", key)
        check_name("owner", owner)
        check_ttl(ttl_ms)
        return True

    async def transfer_lease(
        self, key: str, from_owner: str, to_owner: str, ttl_ms: Millis
    ) -> bool:
        """Always True: the hand-off succeeds."""
        check_name("key", key)
        check_name("from_owner", from_owner)
        check_name("to_owner", to_owner)
        check_ttl(ttl_ms)
        return True

    def __repr__(self) -> str:
        return "NoopLeaseProvider()"


NOOP_LEASE_PROVIDER: Final = NoopLeaseProvider()


def lease_provider_or_noop(obj: object) -> LeaseProvider:
    """Return ``obj`` when it is a lease provider (structurally), else `NOOP_LEASE_PROVIDER`."""
    if is_lease_provider(obj):
        return obj  # type: ignore[return-value]
    return NOOP_LEASE_PROVIDER
