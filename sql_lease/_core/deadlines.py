"""Per-call deadlines enforced by one watchdog task per provider, not by a timer per call.

A timer per call (``asyncio.timeout``, or asyncpg's ``timeout=``) costs a heap push and a
cancelled handle left in the loop's heap; at tens of thousands of calls per second that is a
tenth of a call's CPU. Instead each call registers its deadline here, and a watchdog waking
every `TICK` seconds while calls are in flight cancels the task of any call past its deadline.
Deadlines are on `time.monotonic` (cheaper to read than ``loop.time()``, and the same clock).
`Deadlines.timed_out` then tells the cancellation apart from an outer one (the way `asyncio.timeout`
does, with `Task.uncancel`), so the provider can turn it into a timeout error.
"""

from __future__ import annotations

import asyncio
from asyncio import current_task, get_running_loop
from time import monotonic
from typing import Any, Final

__all__ = ["SERVER_SHARE", "TICK", "Deadlines", "server_millis"]

TICK: Final = 0.01  # seconds: how late past its deadline a call can be cancelled
#: The server-side bounds of a call (statement, lock and busy timeouts) as a share of its own
#: timeout: the server gives up first, with an error that says nothing was applied.
SERVER_SHARE: Final = 0.8


def server_millis(seconds: float) -> int:
    """The server-side bound, in whole milliseconds (at least 1), of a call given ``seconds``."""
    return max(1, round(seconds * 1000 * SERVER_SHARE))


class Deadlines:
    """The calls in flight on one provider, and the watchdog that enforces their deadlines.

    A call is identified by its task (a task runs one provider call at a time): `start`
    registers it and returns the task, `finish` forgets it, and `timed_out` tells after a
    `CancelledError` whether the watchdog caused it. No object is made per call.
    """

    __slots__ = ("_calls", "_counted", "_expired", "_loop", "_watchdog", "loops")

    def __init__(self) -> None:
        #: task -> (deadline on `monotonic`, the task's cancellation count at the start)
        self._calls: dict[asyncio.Task[Any], tuple[float, int]] = {}
        self._expired: set[asyncio.Task[Any]] = set()
        self._watchdog: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: How many event loops calls have come from, one after the other (a provider reused
        #: from a second ``asyncio.run``): connections of an earlier loop are unusable.
        self.loops = 0
        self._counted: asyncio.AbstractEventLoop | None = None

    def start(self, timeout: float) -> asyncio.Task[Any]:
        """Register the current task's call, which must end within ``timeout`` seconds."""
        loop = get_running_loop()
        task = current_task(loop)
        assert task is not None  # calls run inside a task
        self._calls[task] = (monotonic() + timeout, task.cancelling())
        watchdog = self._watchdog
        if watchdog is None or watchdog.done() or self._loop is not loop:
            # None, cancelled before it ran, or left behind on another (finished) event loop.
            if loop is not self._counted:
                self.count_loop()
            self._loop = loop
            self._watchdog = loop.create_task(self._watch(), name="sql_lease deadlines")
        return task

    def count_loop(self) -> int:
        """`loops`, counting the running event loop (once) if it is a new one."""
        loop = get_running_loop()
        if loop is not self._counted:
            self._counted = loop
            self.loops += 1
        return self.loops

    def timed_out(self, task: asyncio.Task[Any]) -> bool:
        """After a CancelledError in ``task``'s call: True when it was the call's deadline
        (and nothing else cancelled the task)."""
        if task not in self._expired:
            return False
        return task.uncancel() <= self._calls[task][1]

    def finish(self, task: asyncio.Task[Any]) -> None:
        self._calls.pop(task, None)
        if self._expired:
            self._expired.discard(task)

    async def _watch(self) -> None:
        loop = get_running_loop()
        me = current_task(loop)
        calls, expired = self._calls, self._expired
        try:
            while calls:
                await asyncio.sleep(TICK)
                now = monotonic()
                for task, (deadline, _) in list(calls.items()):
                    if deadline <= now and task not in expired and task.get_loop() is loop:
                        expired.add(task)
                        task.cancel()
        finally:
            if self._watchdog is me:
                self._watchdog = None
