"""State kept per provider object (renewal scheduler, waiters) without keeping it alive."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["PerProvider"]

T = TypeVar("T")


class PerProvider(Generic[T]):
    """One ``T`` per provider, made on first use by ``make(provider, weak)``.

    Kept in a `weakref.WeakKeyDictionary`, so it goes away with its provider. A provider that
    cannot be weakly referenced (the noop) is kept, with its ``T``, for good: ``make`` is then
    called with ``weak=False``.
    """

    __slots__ = ("_make", "_pinned", "_weak")

    def __init__(self, make: Callable[[Any, bool], T]) -> None:
        self._make = make
        self._weak: weakref.WeakKeyDictionary[Any, T] = weakref.WeakKeyDictionary()
        self._pinned: dict[int, tuple[Any, T]] = {}

    def get(self, provider: Any) -> T:
        """The ``T`` of ``provider``, made now if it has none."""
        try:
            found = self._weak.get(provider)
            if found is None:
                found = self._weak[provider] = self._make(provider, True)
            return found
        except TypeError:  # not weakly referenceable
            pinned = self._pinned.get(id(provider))
            if pinned is None:
                pinned = self._pinned[id(provider)] = (provider, self._make(provider, False))
            return pinned[1]

    def find(self, provider: Any) -> T | None:
        """The ``T`` of ``provider`` if it has one (never makes one)."""
        try:
            return self._weak.get(provider)
        except TypeError:
            pinned = self._pinned.get(id(provider))
            return None if pinned is None else pinned[1]
