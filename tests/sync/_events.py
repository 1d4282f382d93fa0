"""Waiting for an event in sync tests instead of sleeping for a guessed time."""

from __future__ import annotations

import time
from collections.abc import Callable

EVENT_S = 30.0  # a missing event fails after this long (a bound on hangs, not on speed)


def eventually(condition: Callable[[], object], what: str, within: float = EVENT_S) -> None:
    """Return once ``condition()`` is true; fail naming ``what`` after ``within`` s."""
    give_up = time.monotonic() + within
    while not condition():
        if time.monotonic() > give_up:
            raise AssertionError(f"{what}: not seen within {within} s")
        time.sleep(0.005)
