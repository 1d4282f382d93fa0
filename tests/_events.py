"""Waiting for events in tests instead of sleeping for a guessed time.

A test that sleeps "long enough" for something to happen fails on a loaded machine; a test that
waits for the thing itself does not. `eventually` polls a condition until it holds; its bound
is only there to turn a missing event into a failure instead of a hang, far above how long the
event takes even on a busy machine.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from datetime import datetime, timedelta

__all__ = ["EVENT_S", "acquired_at", "eventually"]

EVENT_S = 30.0  # a missing event fails after this long (a bound on hangs, not on speed)


async def eventually(condition: Callable[[], object], what: str, within: float = EVENT_S) -> None:
    """Return once ``condition()`` (a value, or an awaitable of one) is true; fail the test
    naming ``what`` after ``within`` s."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + within
    while not await _value(condition()):
        if loop.time() > give_up:
            raise AssertionError(f"{what}: not seen within {within} s")
        await asyncio.sleep(0.005)


async def _value(result: object) -> object:
    return await result if inspect.isawaitable(result) else result


def acquired_at(expires_at: datetime | None, ttl_ms: int) -> datetime:
    """When a lease was taken, by the provider's clock: its first expiry minus its TTL."""
    assert expires_at is not None
    return expires_at - timedelta(milliseconds=ttl_ms)
