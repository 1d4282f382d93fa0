"""The `LeaseProvider` contract (Mastra's, in snake_case) and the values it returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

__all__ = [
    "LEASE_METHODS",
    "AcquireResult",
    "ForeignLease",
    "Lease",
    "LeaseProvider",
    "is_lease_provider",
    "result",
]

#: The five methods that make an object a lease provider (structural detection).
LEASE_METHODS = (
    "acquire_lease",
    "get_lease_owner",
    "release_lease",
    "renew_lease",
    "transfer_lease",
)


@dataclass(frozen=True, slots=True)
class AcquireResult:
    """Outcome of `LeaseProvider.acquire_lease`.

    ``owner`` is the holder after the call: the caller when ``acquired`` is True, otherwise the
    live holder (never None while one exists). ``fence`` and ``expires_at`` describe that
    holder's lease when the backend knows them (``expires_at`` is timezone-aware, database time).
    """

    acquired: bool
    owner: str | None
    fence: int | None = None
    expires_at: datetime | None = None


def _result_maker() -> Callable[[bool, str | None, int | None, datetime | None], AcquireResult]:
    """`result`: an `AcquireResult` built by setting its slots directly. A frozen dataclass's
    ``__init__`` goes through ``object.__setattr__`` per field (about 0.45 µs for four): on the
    hot paths that is a sixth of a contended acquire's client CPU. Same value, same type."""
    slots = AcquireResult.__dict__
    set_acquired, set_owner, set_fence, set_expires = (
        slots[name].__set__ for name in ("acquired", "owner", "fence", "expires_at")
    )
    new = object.__new__

    def result(
        acquired: bool, owner: str | None, fence: int | None, expires_at: datetime | None
    ) -> AcquireResult:
        made: AcquireResult = new(AcquireResult)
        set_acquired(made, acquired)
        set_owner(made, owner)
        set_fence(made, fence)
        set_expires(made, expires_at)
        return made

    return result


#: ``AcquireResult(acquired, owner, fence, expires_at)``, all four given, for the hot paths.
result = _result_maker()


@dataclass(frozen=True, slots=True)
class Lease:
    """A live lease as returned by ``get_lease``; times are timezone-aware database times."""

    key: str
    owner: str
    fence: int
    expires_at: datetime
    acquired_at: datetime
    #: What the holder stored with the lease (``metadata=``): bytes or str as given, or None.
    metadata: bytes | str | None = None


@dataclass(frozen=True, slots=True)
class ForeignLease(Lease):
    """A live row that another tool wrote with a key or owner that is not UTF-8, as
    `list_leases` shows it: ``key_bytes`` and ``owner_bytes`` are the stored bytes; ``key`` and
    ``owner`` are their text when it is UTF-8, else ``\\x`` and the hex of the bytes (a label
    for people: it names another key, so never pass it back to a lease call)."""

    key_bytes: bytes = b""
    owner_bytes: bytes = b""


@runtime_checkable
class LeaseProvider(Protocol):
    """One owner per key, with atomic acquire, owner-checked release/renew and gap-free transfer."""

    async def acquire_lease(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        """Claim ``key`` for ``owner`` for ``ttl_ms`` milliseconds if free, expired or already
        ``owner``'s (then only the expiry moves; the fence stays); else report the holder."""
        ...

    async def get_lease_owner(self, key: str) -> str | None:
        """The owner of the live lease of ``key``, or None if it is absent or expired."""
        ...

    async def release_lease(self, key: str, owner: str) -> None:
        """End the lease of ``key`` if ``owner`` holds it (live or expired); else do nothing."""
        ...

    async def renew_lease(self, key: str, owner: str, ttl_ms: int) -> bool:
        """Set the expiry of ``owner``'s live lease of ``key`` to now + ``ttl_ms`` ms; False (and
        nothing changed) when it is expired, absent or someone else's."""
        ...

    async def transfer_lease(self, key: str, from_owner: str, to_owner: str, ttl_ms: int) -> bool:
        """Hand ``from_owner``'s live lease of ``key`` to ``to_owner`` for ``ttl_ms`` ms with a
        new fence, atomically (the key is never free); False when not held by ``from_owner``."""
        ...


def is_lease_provider(obj: object) -> bool:
    """True when ``obj`` has all five lease methods and each is callable (structural check)."""
    return all(callable(getattr(obj, name, None)) for name in LEASE_METHODS)
