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
"""

from __future__ import annotations

import asyncio
import math
import random
from functools import partial

from .._core.contract import AcquireResult, LeaseProvider
from .._core.validate import Millis, check_millis, check_name, check_ttl
from ..capabilities import WantMarking
from ..errors import LeaseClosedError
from ..observer import LeaseEvent, LeaseEventKind, LeaseObserver, observer_of, report_lease_event
from .hub import Hub, Waiter
from .runtime import runtime_of

__all__ = ["POLL_S", "hub_for", "wait_for", "wait_for_lease"]

#: Re-check interval for providers that cannot notify (SQLite), in seconds.
POLL_S = 0.05
_JITTER_S = (0.005, 0.05)  # added to expiry re-checks and reconnect wake-ups


def hub_for(provider: LeaseProvider) -> Hub:
    """The waiter registry of ``provider`` (created on first use; diagnostics and tests)."""
    return runtime_of(provider).hub


async def wait_for(
    provider: LeaseProvider,
    key: str,
    owner: str,
    ttl_ms: Millis,
    timeout_ms: Millis,
    limit: int = 1,
) -> tuple[AcquireResult, float]:
    """`wait_for_lease`, also returning the loop time at which the last acquire started.
    ``limit`` other than 1: a slot of a counting lease (our providers' ``limit=``)."""
    check_name("key", key)
    check_name("owner", owner)
    ttl = check_ttl(ttl_ms)
    timeout = check_millis("timeout_ms", timeout_ms)
    acquire = provider.acquire_lease
    if limit != 1 or type(limit) is not int:
        acquire = partial(provider.acquire_lease, limit=limit)  # type: ignore[call-arg]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout / 1000
    started = loop.time()
    result = await acquire(key, owner, ttl)
    if result.acquired or timeout == 0:
        return result, started
    hub = hub_for(provider)
    marks = provider if isinstance(provider, WantMarking) else None
    observer = observer_of(provider)
    waiter = Waiter(key, loop)
    try:
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return result, started
            wait_ms = max(1, math.ceil(remaining * 1000))
            marked = None if marks is None else await marks.mark_wanted(key, wait_ms)
            hub.arm(waiter)
            if hub.listener is not None:
                if hub.closed:  # closed meanwhile: do not start a listener again
                    raise LeaseClosedError("wait_for_lease")
                await hub.listener.ready(min(remaining, hub.ready_within))
            waiter.generation = hub.generation()
            started = loop.time()
            result = await acquire(key, owner, ttl)
            if result.acquired:
                return result, started
            # The key was free when it was marked, and someone took it since: mark the new
            # holder's lease, or its release would notify nobody (and we would sleep until
            # its expiry). Free again meanwhile: go round and acquire.
            if (
                marks is not None
                and marked is None
                and await marks.mark_wanted(key, wait_ms) is None
            ):
                continue
            await _sleep(hub, waiter, provider, result, deadline, observer, owner)
            started = loop.time()
            result = await acquire(key, owner, ttl)
            if result.acquired:
                return result, started
    except BaseException:
        if waiter.reason == "notify" and waiter.event.is_set():
            hub.notify(key)  # we were woken but leave without acting on it: pass it on
        raise
    finally:
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
    wake_at = deadline
    if result.expires_at is not None:
        until = await hub.seconds_until(provider, result.expires_at)
        wake_at = min(wake_at, loop.time() + max(0.0, until) + random.uniform(*_JITTER_S))
    if hub.listener is None and not hub.self_notifying:
        wake_at = min(wake_at, loop.time() + POLL_S)
    # A reconnect since arming means notifications may have been missed: look again at once.
    if waiter.generation != hub.generation():
        return
    key = waiter.key
    if observer is not None:
        waited = LeaseEvent(LeaseEventKind.WAITED, key, owner, result.fence, result.owner)
        report_lease_event(observer, waited)
    waiter.sleeping = True
    try:
        async with asyncio.timeout_at(wake_at):
            await waiter.event.wait()
    except TimeoutError:
        pass
    finally:
        waiter.sleeping = False
    if observer is not None:
        why = waiter.reason or "timer"
        woke = LeaseEvent(LeaseEventKind.WOKE, key, owner, result.fence, why)
        report_lease_event(observer, woke)
    if waiter.reason == "reconnect":
        await asyncio.sleep(random.uniform(*_JITTER_S))


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
