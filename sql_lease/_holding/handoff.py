"""A lease changing hands: the checks of ``transfer_to`` and ``adopt``, and a transfer whose
outcome was unknown settled by reading the owner (the async and sync holds share the checks).
"""

from __future__ import annotations

from .._core.contract import AcquireResult, LeaseProvider
from .._core.validate import Millis, check_name, check_ttl
from ..errors import LeaseDatabaseError, LeaseTypeError, LeaseValueError

__all__ = ["check_adoptable", "check_transfer", "transfer_settled"]


def check_transfer(owner: str, to_owner: str, ttl_ms: Millis | None, held_ttl: int) -> int:
    """The TTL (ms) of a transfer from ``owner`` to ``to_owner`` (default ``held_ttl``)."""
    check_name("to_owner", to_owner)
    ttl = held_ttl if ttl_ms is None else check_ttl(ttl_ms)
    if to_owner == owner:
        raise LeaseValueError("to_owner must differ from the owner (renewal is automatic)")
    return ttl


def check_adoptable(result: AcquireResult, started: object) -> tuple[str, float]:
    """The owner and start time of a lease that ``result`` granted, for ``adopt``."""
    if not result.acquired or result.owner is None:
        raise LeaseValueError(f"only an acquired lease can be adopted, not {result!r}")
    if not isinstance(started, (int, float)) or isinstance(started, bool):
        raise LeaseTypeError("started must be an event-loop time (float)")
    return result.owner, float(started)


async def transfer_settled(
    provider: LeaseProvider, key: str, owner: str, to_owner: str, ttl_ms: int
) -> bool:
    """``transfer_lease``; when it failed with its outcome unknown and ``to_owner`` now holds
    ``key``, the transfer happened (True); any other database error propagates."""
    try:
        return await provider.transfer_lease(key, owner, to_owner, ttl_ms)
    except LeaseDatabaseError as exc:
        if exc.outcome_unknown and await _holds(provider, key, to_owner):
            return True
        raise


async def _holds(provider: LeaseProvider, key: str, owner: str) -> bool:
    try:
        return await provider.get_lease_owner(key) == owner
    except LeaseDatabaseError:
        return False
