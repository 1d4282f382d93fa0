"""Observers for tests: one that records every event, one that always raises."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from sql_lease import LeaseEvent, LeaseEventKind, StatementEvent

#: The events about contention (acquire outcomes, waits' ends, late renewals): `Recorder`
#: keeps them apart, so that ``events`` is the life of holds and waits as before them.
CONTENTION = frozenset(
    {
        LeaseEventKind.GRANTED,
        LeaseEventKind.REFUSED,
        LeaseEventKind.ACQUIRE_FAILED,
        LeaseEventKind.WAIT_ENDED,
        LeaseEventKind.RENEWED_LATE,
    }
)


class Recorder:
    """Keeps every event (``events``; those of `CONTENTION` in ``contention``);
    ``when(predicate)`` waits for an event that matches."""

    def __init__(self) -> None:
        self.statements: list[StatementEvent] = []
        self.events: list[LeaseEvent] = []
        self.contention: list[LeaseEvent] = []
        self._changed = asyncio.Event()

    def on_statement(self, event: StatementEvent) -> None:
        self.statements.append(event)

    def on_lease_event(self, event: LeaseEvent) -> None:
        (self.contention if event.kind in CONTENTION else self.events).append(event)
        self._changed.set()

    def kinds(self) -> list[LeaseEventKind]:
        return [e.kind for e in self.events]

    def operations(self) -> list[str]:
        return [s.operation for s in self.statements]

    async def when(self, predicate: Callable[[LeaseEvent], bool]) -> LeaseEvent:
        async with asyncio.timeout(30):
            while True:
                for event in [*self.events, *self.contention]:
                    if predicate(event):
                        return event
                self._changed.clear()
                await self._changed.wait()


class Broken:
    """An observer whose every method raises."""

    def __init__(self) -> None:
        self.calls = 0

    def on_statement(self, event: StatementEvent) -> None:
        self.calls += 1
        raise RuntimeError("observer bug")

    def on_lease_event(self, event: LeaseEvent) -> None:
        self.calls += 1
        raise RuntimeError("observer bug")
