"""What a hold of several keys shows, shared by the async and the sync `HeldLeases`.

Each key is held by a one-key hold of its own (`HeldLease`, async or sync); the record shows
them together. What differs (awaiting or blocking, cancelling the body or setting an event)
stays in each driver: `sql_lease._holding.held_keys` and `sql_lease.sync._hold_keys`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar, cast

from .._core.counting import AcquireAllResult
from .._core.policy import HoldTerms
from ..errors import LeaseNotAcquired
from .hooks import HOOK_NAMES, Hooks

__all__ = ["KeyHold", "KeysRecord", "check_hooks"]


class KeyHold(Protocol):
    """What the record reads of one key's hold."""

    @property
    def fence(self) -> int | None: ...
    @property
    def held(self) -> bool: ...
    @property
    def lost_reason(self) -> str | None: ...


H = TypeVar("H", bound=KeyHold)


def check_hooks(key: str, options: Mapping[str, object]) -> None:
    """Raise `LeaseTypeError` for a hook among ``options`` that is not callable (before I/O)."""
    hooks = {name: options.get(name) for name in HOOK_NAMES}
    Hooks(key, cast(dict[str, Callable[[object], object] | None], hooks))


class KeysRecord(Generic[H]):
    """The record of a hold of several keys; `HeldLeases` classes inherit it."""

    keys: tuple[str, ...]
    owner: str
    ttl_ms: int
    renew_every_ms: int
    _holds: dict[str, H]

    def _start_record(self, keys: tuple[str, ...], terms: HoldTerms) -> None:
        self.keys, self.owner, self.ttl_ms = keys, terms.owner, terms.ttl_ms
        self.renew_every_ms = terms.renew_every_ms
        self._holds = {}
        self._entered = False

    def _enter_once(self) -> None:
        if self._entered:
            raise RuntimeError("a HeldLeases can be entered only once")
        self._entered = True

    @property
    def holds(self) -> dict[str, H]:
        """Each key's one-key hold (empty until entered)."""
        return dict(self._holds)

    @property
    def fences(self) -> dict[str, int | None]:
        """Each key's fence (empty until entered)."""
        return {key: held.fence for key, held in self._holds.items()}

    @property
    def held(self) -> bool:
        """True while every key is ours."""
        return bool(self._holds) and all(held.held for held in self._holds.values())

    @property
    def lost_reason(self) -> str | None:
        """Which key was lost first, and why; None while none was."""
        for key, held in self._holds.items():
            if held.lost_reason is not None:
                return f"{key!r}: {held.lost_reason}"
        return None

    if TYPE_CHECKING:  # the driver's

        def _unclaim(self, keys: list[str]) -> None: ...

    def _refused(self, result: AcquireAllResult, claimed: list[str]) -> LeaseNotAcquired:
        """Entering took none (``result``): the claims of ``claimed`` forgotten, what it
        raises (the key that blocked, its holder)."""
        self._unclaim(claimed)
        key = result.blocked_key or self.keys[0]
        return LeaseNotAcquired(key, self.owner, result.blocked_by, None, None)

    def __repr__(self) -> str:
        return f"HeldLeases(keys={self.keys!r}, owner={self.owner!r}, fences={self.fences})"
