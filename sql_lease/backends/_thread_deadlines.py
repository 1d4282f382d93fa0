"""Per-call deadlines for blocking calls: one long-lived watchdog thread per executor.

A call registers its deadline and what to run when it passes (cancel the statement, interrupt
SQLite); the watchdog runs that from its own thread, so the blocked caller wakes with an error
that the provider reports as a timeout.

Registering is cheap: a dict store and one comparison. The watchdog sleeps until the soonest
deadline it has seen, or `IDLE_TICK` when it saw no call (`_wake_at`), and is woken early only
by a call whose deadline comes sooner than that (a timeout under `IDLE_TICK`, or the first
call once the thread has ended); calls that ended meanwhile are simply gone when it looks.
Each call is claimed exactly once, by its `finish` or by the watchdog (an atomic
``dict.pop``), so a call the watchdog interrupted always learns it was. The thread ends after
`LINGER_S` without calls, or at its next look after `close` with no call in flight.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import threading
from collections.abc import Callable
from time import monotonic
from typing import Any, Final

__all__ = ["IDLE_TICK", "LINGER_S", "Deadlines", "OnExpire"]

LINGER_S: Final = 30.0  # seconds the watchdog stays without calls (then restarts on demand)
IDLE_TICK: Final = 0.25  # seconds between looks while no call is in flight

#: What the watchdog runs for a call past its deadline: ``on_expire(arg, ended)``; ``ended`` is
#: set once the call has returned (so a second, harsher step can wait for it).
OnExpire = Callable[[Any, threading.Event], None]


class Deadlines:
    """Calls in flight and their deadlines; `finish` tells whether a call was interrupted."""

    __slots__ = ("_calls", "_closed", "_cond", "_ended", "_ids", "_poked", "_thread", "_wake_at")

    def __init__(self) -> None:
        self._calls: dict[int, tuple[float, OnExpire, Any]] = {}
        self._ended: dict[int, threading.Event] = {}  # interrupted calls not finished yet
        self._ids = itertools.count()
        self._cond = threading.Condition(threading.Lock())
        self._wake_at = math.inf  # the watchdog looks again by then (inf: nobody is watching)
        self._poked = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def start(self, deadline: float, on_expire: OnExpire, arg: Any) -> int:
        """Register a call that must end by ``deadline`` (`monotonic`); returns its id.

        Past the deadline the watchdog runs ``on_expire(arg, ended)`` once, from its thread.
        Every `start` must be followed by `finish`.
        """
        call = next(self._ids)
        self._calls[call] = (deadline, on_expire, arg)
        if deadline < self._wake_at:
            self._poke()
        return call

    def finish(self, call: int) -> bool:
        """Forget ``call``; True when its deadline had passed and it was interrupted."""
        if self._calls.pop(call, None) is not None:
            return False
        with self._cond:
            ended = self._ended.pop(call, None)
        if ended is not None:
            ended.set()
        return True

    def close(self) -> None:
        """Let the watchdog end as soon as no call is in flight (later calls still work)."""
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _poke(self) -> None:
        with self._cond:
            self._poked = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="sql_lease deadlines", daemon=True
                )
                self._thread.start()
            else:
                self._cond.notify()

    def _watch(self) -> None:
        cond = self._cond
        calls = self._calls
        idle_since: float | None = None
        while True:
            with cond:
                self._poked = False
                # From here until the scan below has seen them, new calls poke the watchdog.
                self._wake_at = math.inf
            now = monotonic()
            soonest = math.inf
            due: list[tuple[OnExpire, Any, threading.Event]] = []
            for call, (deadline, on_expire, arg) in calls.copy().items():
                if deadline > now:
                    soonest = min(soonest, deadline)
                    continue
                with cond:
                    if calls.pop(call, None) is None:
                        continue  # it finished meanwhile
                    ended = self._ended[call] = threading.Event()
                due.append((on_expire, arg, ended))
            for on_expire, arg, ended in due:
                with contextlib.suppress(Exception):
                    on_expire(arg, ended)
            with cond:
                if self._poked:
                    continue
                if soonest == math.inf:
                    # No call in flight (short calls come and go between looks): look again
                    # in IDLE_TICK, so that calls whose deadlines lie beyond need not poke.
                    idle_since = now if idle_since is None else idle_since
                    if self._closed or now - idle_since >= LINGER_S:
                        self._thread = None
                        return
                    soonest = now + IDLE_TICK
                else:
                    idle_since = None
                self._wake_at = soonest
                cond.wait(max(0.0, soonest - monotonic()))
