"""Waiting for a busy key without busy polling (``provider.wait_for_lease(...)``).

A waiter tries to acquire; if the key is taken it marks the key wanted (`WantMarking`, so the
holder's release, transfer or force-release sends a notification), makes sure its provider's
notification channel listens (`NotificationSource`), tries again (closing the race with a
release in between) and sleeps until notified, until the holder's known expiry (plus jitter),
or until its timeout, then retries. If the key was free when it was marked and someone took it
before the retry, the new holder's lease is marked too, or its release would send nothing.

Notifications are hints, never needed for correctness: on PostgreSQL they come through one
LISTEN connection per provider, which can drop them (lost connection, poolers), so a waiter
also re-checks at the holder's expiry and after the listener reconnects. A notification wakes
one local waiter of the key (the first in line), not all of them; the expiry re-checks are
jittered. A provider that wakes its own waiters (in memory) is never polled. Others (SQLite,
providers without notifications) are re-checked every `POLL_S` seconds, and releases made
through `hold` in this process wake a waiter at once.

The loop itself is `sql_lease._core.waiting.wait_steps`, shared with the sync API; this module
performs its steps with asyncio.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Awaitable, Callable
from typing import cast

from .._core.contract import AcquireResult, LeaseProvider
from .._core.counting import AcquireAllResult
from .._core.policy import CheckedCalls, HoldTerms, acquire_call, wait_terms
from .._core.validate import Millis
from .._core.waiting import JITTER_S, POLL_S, StepKind, advance, wait_steps, wake_at
from ..capabilities import AllOrNone, WantMarking
from ..errors import LeaseClosedError
from ..observer import (
    LeaseEventKind,
    LeaseObserver,
    observed_wait,
    observer_of,
    report_wait,
)
from .hub import Hub, Waiter
from .runtime import runtime_of

__all__ = [
    "POLL_S",
    "acquirer",
    "hub_for",
    "wait_all",
    "wait_checked",
    "wait_for",
    "wait_for_lease",
]

#: One try of a waiter: an acquire (of a key, or of every key of a hold).
Attempt = Callable[[], Awaitable[AcquireResult]]


def hub_for(provider: LeaseProvider) -> Hub:
    """The waiter registry of ``provider`` (created on first use; diagnostics and tests)."""
    return runtime_of(provider).hub


def acquirer(
    provider: LeaseProvider, terms: HoldTerms, limit: int = 1
) -> Callable[[], Awaitable[AcquireResult]]:
    """The acquire of checked ``terms``: our providers take them as they are (`CheckedCalls`),
    others get ``acquire_lease``; ``limit`` other than 1: a slot of a counting lease (our
    providers' ``acquire_lease(..., limit=)``, which checks it)."""
    call: Callable[[], Awaitable[AcquireResult]] = acquire_call(
        provider, terms, limit, isinstance(provider, CheckedCalls)
    )
    return call


async def wait_for(
    provider: LeaseProvider,
    key: str,
    owner: str,
    ttl_ms: Millis,
    timeout_ms: Millis,
    limit: int = 1,
) -> tuple[AcquireResult, float]:
    """`wait_for_lease`, also returning the loop time at which the last acquire started."""
    return await wait_checked(provider, wait_terms(key, owner, ttl_ms, timeout_ms), limit)


async def wait_checked(
    provider: LeaseProvider, terms: HoldTerms, limit: int = 1, acquire: Attempt | None = None
) -> tuple[AcquireResult, float]:
    """`wait_for` with arguments checked already (a hold's: checked once, not again here);
    ``terms.wait_ms`` is the timeout. Reported to the provider's observer as one
    ``WAIT_ENDED`` event. ``limit`` other than 1: a slot of a counting lease (our providers'
    ``limit=``). ``acquire``: the attempt instead of acquiring ``terms.key`` (`wait_all`)."""
    attempt = acquire or acquirer(provider, terms, limit)
    observer = observer_of(provider)
    if observer is None:
        return await _wait_checked(provider, terms, None, attempt)
    wait = _wait_checked(provider, terms, observer, attempt)
    return await observed_wait(observer, terms.key, terms.owner, wait)


async def wait_all(
    provider: AllOrNone, keys: tuple[str, ...], owner: str, ttl_ms: int, wait_ms: int
) -> tuple[AcquireAllResult, float]:
    """``acquire_leases`` of ``keys`` (checked), waiting up to ``wait_ms`` for all of them:
    while refused, wait as `wait_for_lease` does on the key that blocked (woken by its
    release, its holder's expiry or the next poll), each attempt taking all keys or none;
    when another key blocks, wait on that one. The last result and the loop time at which
    its attempt started."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_ms / 1000
    last: list[tuple[AcquireAllResult, float]] = []

    async def attempt() -> AcquireAllResult:
        started = loop.time()
        result = await provider.acquire_leases(keys, owner, ttl_ms)
        last[:] = [(result, started)]
        return result

    result = await attempt()
    while not result.acquired and result.blocked_key is not None:
        left = math.ceil((deadline - loop.time()) * 1000)
        if left <= 0:
            break
        blocked = result.blocked_key

        async def on_blocked(blocked: str = blocked) -> AcquireResult:
            again = await attempt()
            if again.acquired or again.blocked_key != blocked:
                return AcquireResult(True, owner)  # done, or another key to wait on
            lease = await provider.get_lease(blocked)  # its expiry: when to look again
            expiry = None if lease is None else lease.expires_at
            return AcquireResult(False, again.blocked_by, None, expiry)

        terms = wait_terms(blocked, owner, ttl_ms, left)
        await wait_checked(cast(LeaseProvider, provider), terms, acquire=on_blocked)
        result = last[0][0]
    return last[0]


async def _wait_checked(
    provider: LeaseProvider, terms: HoldTerms, observer: LeaseObserver | None, acquire: Attempt
) -> tuple[AcquireResult, float]:
    key, owner, timeout_ms = terms.key, terms.owner, terms.wait_ms
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_ms / 1000
    started = loop.time()
    result = await acquire()
    if result.acquired or timeout_ms == 0:
        return result, started
    hub = hub_for(provider)
    marks = provider if isinstance(provider, WantMarking) else None
    waiter = Waiter(key, loop)
    steps = wait_steps(deadline, loop.time, marks is not None)
    answer: object = None
    try:
        while (step := advance(steps, answer)) is not None:
            kind = step.kind
            if kind is StepKind.ACQUIRE:
                started = loop.time()
                result = await acquire()
                answer = result.acquired
            elif kind is StepKind.MARK:
                assert marks is not None
                answer = await marks.mark_wanted(key, step.wait_ms)
            elif kind is StepKind.LISTEN:
                hub.arm(waiter)
                if hub.listener is not None:
                    if hub.closed:  # closed meanwhile: do not start a listener again
                        raise LeaseClosedError("wait_for_lease")
                    await hub.listener.ready(min(step.remaining, hub.ready_within))
                waiter.generation = hub.generation()
                answer = None
            else:
                await _sleep(hub, waiter, provider, result, deadline, observer, owner)
                answer = None
        return result, started
    except BaseException:
        if waiter.reason == "notify" and waiter.event.is_set():
            hub.notify(key)  # we were woken but leave without acting on it: pass it on
        raise
    finally:
        steps.close()
        hub.remove(waiter)


async def _sleep(
    hub: Hub,
    waiter: Waiter,
    provider: LeaseProvider,
    result: AcquireResult,
    deadline: float,
    observer: LeaseObserver | None,
    owner: str,
) -> None:
    """Sleep until ``waiter`` is woken, the holder's expiry, the next poll or ``deadline``."""
    loop = asyncio.get_running_loop()
    until = None
    if result.expires_at is not None:
        until = await hub.seconds_until(provider, result.expires_at)
    jitter = random.uniform(*JITTER_S)
    wake = wake_at(loop.time(), deadline, until, POLL_S if hub.polls else None, jitter)
    # A reconnect since arming means notifications may have been missed: look again at once.
    if waiter.generation != hub.generation():
        return
    report_wait(observer, LeaseEventKind.WAITED, waiter.key, owner, result)
    waiter.sleeping = True
    try:
        async with asyncio.timeout_at(wake):
            await waiter.event.wait()
    except TimeoutError:
        pass
    finally:
        waiter.sleeping = False
    report_wait(observer, LeaseEventKind.WOKE, waiter.key, owner, result, waiter.reason)
    if waiter.reason == "reconnect":
        await asyncio.sleep(random.uniform(*JITTER_S))


async def wait_for_lease(
    provider: LeaseProvider,
    key: str,
    owner: str,
    ttl_ms: Millis,
    *,
    timeout_ms: Millis,
    limit: int = 1,
) -> AcquireResult:
    """Acquire ``key`` for ``owner``, waiting up to ``timeout_ms`` for it to become free.

    Works with any `LeaseProvider`. Returns the acquired result, or after the timeout the last
    result (naming the holder). ``timeout_ms=0`` is a single `acquire_lease`. Database errors
    propagate.
    """
    result, _ = await wait_for(provider, key, owner, ttl_ms, timeout_ms, limit)
    return result
