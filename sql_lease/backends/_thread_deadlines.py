"""Per-call deadlines for blocking calls: one watchdog thread per provider, not a timer per call.

A call registers its deadline and what to do when it passes (cancel the statement, interrupt
SQLite); the watchdog runs that from its own thread, so the blocked caller wakes with an error
that the provider reports as a timeout. The thread exists only while calls are in flight and
wakes every `TICK` seconds then.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable
from time import monotonic
from typing import Final

__all__ = ["TICK", "Deadlines"]

TICK: Final = 0.01  # seconds: how late past its deadline a call is interrupted


class Deadlines:
    """Calls in flight and their deadlines; `finish` tells whether a call was interrupted."""

    __slots__ = ("_calls", "_cond", "_expired", "_ids", "_thread")

    def __init__(self) -> None:
        self._calls: dict[int, tuple[float, Callable[[], None]]] = {}
        self._expired: set[int] = set()
        self._ids = itertools.count()
        self._cond = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None

    def start(self, deadline: float, on_expire: Callable[[], None]) -> int:
        """Register a call that must end by ``deadline`` (`monotonic`); returns its id."""
        call = next(self._ids)
        with self._cond:
            self._calls[call] = (deadline, on_expire)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="sql_lease deadlines", daemon=True
                )
                self._thread.start()
        return call

    def finish(self, call: int) -> bool:
        """Forget ``call``; True when its deadline had passed and it was interrupted."""
        with self._cond:
            self._calls.pop(call, None)
            if call in self._expired:
                self._expired.discard(call)
                return True
            return False

    def _watch(self) -> None:
        cond = self._cond
        while True:
            with cond:
                if not self._calls:
                    self._thread = None
                    return
                now = monotonic()
                due = [
                    (call, act)
                    for call, (deadline, act) in self._calls.items()
                    if deadline <= now and call not in self._expired
                ]
                self._expired.update(call for call, _ in due)
            for _, act in due:
                with contextlib.suppress(Exception):
                    act()
            with cond:
                cond.wait(TICK)
