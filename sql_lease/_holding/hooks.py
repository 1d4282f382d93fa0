"""Lifecycle hooks of a held lease (async and sync holds), and the background tasks that
outlive their caller."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from ..errors import LeaseTypeError

__all__ = ["HOOK_NAMES", "Hooks", "in_background"]

logger = logging.getLogger("sql_lease.hold")

#: The hooks a `HeldLease` accepts, in the order of a lease's life.
HOOK_NAMES = ("on_acquired", "on_renewed", "on_lost", "on_released")

T = TypeVar("T")

_background: set[asyncio.Task[Any]] = set()  # releases and hooks that outlive their caller


def in_background(coro: Coroutine[Any, Any, None], name: str | None = None) -> asyncio.Task[None]:
    """Run ``coro`` as a task that is kept alive until done (its caller may be gone)."""
    task = asyncio.get_running_loop().create_task(coro, name=name)
    _background.add(task)
    task.add_done_callback(_background.discard)
    return task


class Hooks(Generic[T]):
    """The callbacks of one subject (a `HeldLease`), by name; each may be sync or async.

    A failing hook is logged on ``sql_lease.hold`` and never breaks the lease.
    """

    __slots__ = ("_hooks", "_label")

    def __init__(self, label: str, hooks: dict[str, Callable[[T], object] | None]) -> None:
        for name, hook in hooks.items():
            if hook is not None and not callable(hook):
                raise LeaseTypeError(f"{name} must be callable, not {type(hook).__name__}")
        self._label = label
        self._hooks = hooks

    async def call(self, name: str, subject: T) -> None:
        """Call hook ``name`` with ``subject`` (awaiting it if it returns an awaitable)."""
        hook = self._hooks.get(name)
        if hook is None:
            return
        try:
            result = hook(subject)
            if inspect.isawaitable(result):
                await result
        except Exception:
            logger.exception("%s hook of lease %r failed", name, self._label)

    def call_now(self, name: str, subject: T) -> None:
        """Call hook ``name`` with ``subject`` here, not awaiting what it returns (the sync
        hold's hooks, in the calling or the renewal thread)."""
        hook = self._hooks.get(name)
        if hook is None:
            return
        try:
            hook(subject)
        except Exception:
            logger.exception("%s hook of lease %r failed", name, self._label)

    def spawn(self, name: str, subject: T) -> None:
        """Call hook ``name`` in a background task (the caller does not wait for it)."""
        if self._hooks.get(name) is not None:
            in_background(self.call(name, subject))
