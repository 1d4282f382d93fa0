"""Waiting for a busy key, written once for the async and the sync API: no I/O, no asyncio,
no threads.

`wait_steps` is the acquire loop as a generator of `Step`\\ s (psycopg's idea: one I/O-free
source of the protocol, driven by an async and a sync driver): after a first acquire found the
key taken, mark it wanted (so the holder's release, transfer or force-release notifies), listen,
try again (closing the race with a release in between); if the key was free when it was marked
and someone took it since, mark again (the new holder's lease) and, if it is free once more, go
round; then sleep until woken, the holder's expiry (jittered), the next poll or the timeout
(`wake_at`), and try again. The drivers (`sql_lease._holding.wait`, `sql_lease.sync._wait`)
perform each step and send its answer back.

`WaiterLines` is the waiters of one provider by key (first in line is woken first) and
`ClockOffset` the provider clock's offset, measured now and then, that turns the holder's
expiry into local seconds; the hubs of both APIs keep theirs in one of each.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Generator
from datetime import datetime, timedelta
from typing import Final, Generic, NamedTuple, Protocol, TypeVar

__all__ = [
    "JITTER_S",
    "POLL_S",
    "ClockOffset",
    "HubBase",
    "Step",
    "StepKind",
    "WaiterLines",
    "advance",
    "wait_steps",
    "wake_at",
]

#: Re-check interval for providers that cannot notify (SQLite), in seconds.
POLL_S: Final = 0.05
JITTER_S: Final = (0.005, 0.05)  # added to expiry re-checks and reconnect wake-ups
_OFFSET_MAX_AGE_S: Final = 30.0  # how long a measured provider clock offset is trusted


class StepKind(enum.Enum):
    """What a waiter does next (see `wait_steps`)."""

    MARK = "mark"  # mark the key wanted for ``wait_ms``; answer: the holder, or None if free
    LISTEN = "listen"  # get in line and make sure the listener listens; answer: None
    ACQUIRE = "acquire"  # try to acquire; answer: whether it was acquired
    SLEEP = "sleep"  # sleep until woken, the holder's expiry, the next poll or the deadline


class Step(NamedTuple):
    kind: StepKind
    wait_ms: int = 0  # MARK: how long the key is wanted
    remaining: float = 0.0  # LISTEN: seconds left before the deadline


_ACQUIRE: Final = Step(StepKind.ACQUIRE)
_SLEEP: Final = Step(StepKind.SLEEP)

#: The generator's type: it yields steps and is sent each step's answer.
Steps = Generator[Step, object, None]


def wait_steps(deadline: float, clock: Callable[[], float], marks: bool) -> Steps:
    """The wait after a first acquire that found the key taken, until ``deadline`` (of
    ``clock``); ``marks``: the provider can mark keys wanted. It ends once an acquire
    succeeded or the deadline passed (the last acquire's result is the driver's answer)."""
    while True:
        remaining = deadline - clock()
        if remaining <= 0:
            return
        wait_ms = max(1, math.ceil(remaining * 1000))
        free_when_marked = marks and (yield Step(StepKind.MARK, wait_ms)) is None
        yield Step(StepKind.LISTEN, remaining=remaining)
        if (yield _ACQUIRE):
            return
        # The key was free when it was marked, and someone took it since: mark the new
        # holder's lease, or its release would notify nobody (and we would sleep until its
        # expiry). Free again meanwhile: go round and acquire.
        if free_when_marked and (yield Step(StepKind.MARK, wait_ms)) is None:
            continue
        yield _SLEEP
        if (yield _ACQUIRE):
            return


def advance(steps: Steps, answer: object) -> Step | None:
    """The next step of ``steps`` after ``answer`` (the last step's), or None once the wait is
    over (the last acquire's result is its outcome)."""
    try:
        return steps.send(answer)
    except StopIteration:
        return None


def wake_at(
    now: float, deadline: float, until_expiry: float | None, poll_s: float | None, jitter: float
) -> float:
    """When a sleeping waiter looks again: at ``deadline``, at the holder's expiry
    (``until_expiry`` seconds from ``now``, plus ``jitter``) if known, and after ``poll_s``
    (`POLL_S`) when nothing would wake it (else None)."""
    wake = deadline
    if until_expiry is not None:
        wake = min(wake, now + max(0.0, until_expiry) + jitter)
    if poll_s is not None:
        wake = min(wake, now + poll_s)
    return wake


class _Waiter(Protocol):
    key: str
    sleeping: bool


W = TypeVar("W", bound=_Waiter)


class WaiterLines(Generic[W]):
    """Waiters by key, in the order they got in line (no locking: the hub's business)."""

    __slots__ = ("_lines",)

    def __init__(self) -> None:
        self._lines: dict[str, list[W]] = {}

    def __bool__(self) -> bool:
        return bool(self._lines)

    def add(self, waiter: W) -> None:
        """Put ``waiter`` in line for its key (once)."""
        line = self._lines.setdefault(waiter.key, [])
        if waiter not in line:
            line.append(waiter)

    def remove(self, waiter: W) -> None:
        """Take ``waiter`` out of line."""
        line = self._lines.get(waiter.key)
        if line is not None and waiter in line:
            line.remove(waiter)
            if not line:
                del self._lines[waiter.key]

    def first(self, key: str) -> W | None:
        """Take the first waiter in line for ``key`` out of line (the one to wake)."""
        line = self._lines.get(key)
        if not line:
            return None
        waiter = line.pop(0)
        if not line:
            del self._lines[key]
        return waiter

    def sleepers(self) -> list[W]:
        """Take every sleeping waiter out of line."""
        taken: list[W] = []
        for key in list(self._lines):
            line = self._lines[key]
            asleep = [w for w in line if w.sleeping]
            for waiter in asleep:
                line.remove(waiter)
            taken += asleep
            if not line:
                del self._lines[key]
        return taken

    def everyone(self) -> list[W]:
        """Take every waiter out of line."""
        taken = [w for line in self._lines.values() for w in line]
        self._lines.clear()
        return taken

    def sleeping(self, key: str) -> int:
        """How many waiters of ``key`` are asleep in line."""
        return sum(waiter.sleeping for waiter in self._lines.get(key, ()))


class ClockOffset:
    """The provider's clock minus ours, measured at most every 30 s (`stale`)."""

    __slots__ = ("_at", "_offset")

    def __init__(self) -> None:
        self._offset = timedelta(0)
        self._at = -math.inf

    def stale(self, now: float) -> bool:
        """True when the offset wants measuring again at ``now`` (driver's clock)."""
        return now - self._at > _OFFSET_MAX_AGE_S

    def measured(
        self, now: float, before: datetime, theirs: datetime | None, after: datetime
    ) -> None:
        """The provider said ``theirs`` between our ``before`` and ``after`` (None: it has no
        clock of its own; ours counts)."""
        if theirs is not None:
            self._offset = theirs - (before + (after - before) / 2)
        self._at = now

    def seconds_until(self, when: datetime, ours: datetime) -> float:
        """Seconds until ``when`` of the provider's clock, ours being ``ours`` now."""
        return (when - (ours + self._offset)).total_seconds()


class _Listening(Protocol):
    @property
    def generation(self) -> int: ...

    @property
    def connected(self) -> bool: ...


L = TypeVar("L", bound=_Listening)


class HubBase(Generic[W, L]):
    """What the hubs of both APIs keep: the waiters by key (`WaiterLines`), the provider's
    listener (``listener``, None when it cannot notify), whether the provider wakes its own
    waiters (``self_notifying``: the in-memory one) and the provider clock's offset."""

    def __init__(self, *, self_notifying: bool = False) -> None:
        self._lines: WaiterLines[W] = WaiterLines()
        self.listener: L | None = None
        self.self_notifying = self_notifying
        self._clock = ClockOffset()

    @property
    def active(self) -> bool:
        """True while anyone waits."""
        return bool(self._lines)

    @property
    def polls(self) -> bool:
        """True when nothing but a poll finds a release of another process (no listener, and
        the provider does not wake its own waiters); then a release made here wakes a local
        waiter at once."""
        return self.listener is None and not self.self_notifying

    def generation(self) -> int:
        """The current listener connection's number, or -1 when not listening."""
        listener = self.listener
        return listener.generation if listener is not None and listener.connected else -1
