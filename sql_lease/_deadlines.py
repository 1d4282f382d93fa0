"""Per-call deadlines enforced by one watchdog task per provider, not by a timer per call.

A timer per call (``asyncio.timeout``, or asyncpg's ``timeout=``) costs a heap push and a
cancelled handle left in the loop's heap; at tens of thousands of calls per second that is a
tenth of a call's CPU. Instead each call registers its deadline here, and a watchdog waking
every `TICK` seconds while calls are in flight cancels the task of any call past its deadline.
`Call.expired` then tells the cancellation apart from an outer one (the way `asyncio.timeout`
does, with `Task.uncancel`), so the provider can turn it into a timeout error.
"""

from __future__ import annotations

import asyncio
from typing import Final

__all__ = ["TICK", "Call", "Deadlines"]

TICK: Final = 0.01  # seconds: how late past its deadline a call can be cancelled


class Call:
    """One call in flight: its deadline and task, and whether the watchdog cancelled it."""

    __slots__ = ("cancelling", "deadline", "expired", "sent", "task")

    def __init__(self, deadline: float, task: asyncio.Task[object]) -> None:
        self.deadline = deadline
        self.task = task
        self.cancelling = task.cancelling()
        self.expired = False
        self.sent = False

    def timed_out(self) -> bool:
        """After a CancelledError: True when it was this call's deadline (and nothing else)."""
        return self.expired and self.task.uncancel() <= self.cancelling


class Deadlines:
    """The calls in flight on one provider, and the watchdog that enforces their deadlines."""

    __slots__ = ("_calls", "_watchdog")

    def __init__(self) -> None:
        self._calls: set[Call] = set()
        self._watchdog: asyncio.Task[None] | None = None

    def start(self, deadline: float) -> Call:
        task = asyncio.current_task()
        assert task is not None  # calls run inside a task
        call = Call(deadline, task)
        self._calls.add(call)
        watchdog = self._watchdog
        if watchdog is None or watchdog.done() or watchdog.get_loop() is not task.get_loop():
            self._watchdog = task.get_loop().create_task(self._watch(), name="sql_lease deadlines")
        return call

    def finish(self, call: Call) -> None:
        self._calls.discard(call)

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()
        try:
            while self._calls:
                await asyncio.sleep(TICK)
                now = loop.time()
                for call in self._calls:
                    if not call.expired and call.deadline <= now and call.task.get_loop() is loop:
                        call.expired = True
                        call.task.cancel()
        finally:
            if self._watchdog is me:
                self._watchdog = None
