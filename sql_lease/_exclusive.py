"""Exclusive scheduled jobs: run a job on one replica at a time (ShedLock's job, in Python).

    @sql_lease.exclusive(provider, "reports:nightly", at_most_for=timedelta(minutes=10),
                         at_least_for=timedelta(seconds=30))
    def nightly() -> None: ...

Every replica's scheduler fires the job; the first to take the lease named ``name`` runs it,
the others skip the call (it returns None; logged at INFO on ``sql_lease.exclusive``).
``at_most_for`` is the lease's TTL: a holder that crashes blocks the job for at most that
long. While the job runs the lease is renewed (hold semantics), so a long job keeps it.
``at_least_for`` keeps the lease after a fast run, until that long after it was taken, so
replicas whose clocks or schedulers fire a little apart do not run the same tick twice: the
lease is handed (gap-free) to a ``<owner>:at-least`` owner for what is left instead of being
released. Both are `timedelta`\\ s: a bare number is refused (`LeaseTypeError`), since
every other duration of the library is in milliseconds (``*_ms``) and ``at_most_for=10_000``
was once read as seconds (2.8 hours).

Works with the sync provider (`sql_lease.sync`) and the async one, on sync and async
functions: with the async provider the decorated function becomes a coroutine function (a
sync body runs in a worker thread); with the sync provider an async function stays async (the
provider's blocking calls run in a worker thread).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import socket
import uuid
from collections.abc import Callable
from datetime import timedelta
from time import monotonic
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

from ._core.validate import MAX_TTL_MS, check_name
from .errors import LeaseNotAcquired, LeaseTypeError, LeaseValueError

__all__ = ["Exclusive", "exclusive"]

if TYPE_CHECKING:
    from ._holding.lifecycle import LeaseLifecycle
    from .sync._lifecycle import SyncLifecycle

    #: A provider with ``hold()``: ours, async or sync.
    HoldingProvider = LeaseLifecycle | SyncLifecycle

logger = logging.getLogger("sql_lease.exclusive")

F = TypeVar("F", bound=Callable[..., Any])
Duration = timedelta
_NO_TIME = timedelta(0)


def _millis(what: str, value: object, *, zero: bool) -> int:
    if not isinstance(value, timedelta):
        hint = (
            f" (a bare number's unit could be misread: write timedelta(seconds={value!r}) or "
            f"timedelta(milliseconds={value!r}))"
            if isinstance(value, int | float) and not isinstance(value, bool)
            else ""
        )
        raise LeaseTypeError(f"{what} must be a timedelta, not {type(value).__name__}{hint}")
    seconds = value.total_seconds()
    millis = -(-seconds * 1000 // 1)  # rounded up to a whole millisecond
    low = 0 if zero else 1
    if not low <= millis <= MAX_TTL_MS:
        raise LeaseValueError(
            f"{what} must be {'from 0' if zero else 'above 0'} to 365 days, not {value!r}"
        )
    return int(millis)


def default_owner() -> str:
    """A unique owner for one run: host, process id and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def _is_async_provider(provider: object) -> bool:
    return inspect.iscoroutinefunction(getattr(provider, "acquire_lease", None))


class Exclusive:
    """One exclusive run (a context manager) or a decorator making a run per call.

    As a context manager, ``with`` (sync provider) or ``async with`` (either provider) gives
    an object that is truthy when this replica won the lease: ``if not run: return``. The
    attributes ``acquired``, ``lease`` (the held lease while running) and ``holder`` (who
    held it when skipped) tell what happened.
    """

    def __init__(
        self,
        provider: HoldingProvider,
        name: str,
        *,
        at_most_for: Duration,
        at_least_for: Duration = _NO_TIME,
        owner: str | None = None,
    ) -> None:
        check_name("name", name)
        if owner is not None:
            check_name("owner", owner)
        self._most = _millis("at_most_for", at_most_for, zero=False)
        self._least = _millis("at_least_for", at_least_for, zero=True)
        if self._least > self._most:
            raise LeaseValueError(
                f"at_least_for ({self._least} ms) must not exceed at_most_for ({self._most} ms)"
            )
        if not callable(getattr(provider, "hold", None)):
            raise LeaseTypeError(
                f"provider must be a sql_lease provider with hold(), not {type(provider).__name__}"
            )
        if self._most < 2:
            raise LeaseValueError("at_most_for must be at least 2 ms (renewal needs half of it)")
        self._provider = provider
        self._async = _is_async_provider(provider)
        self.name = name
        self._owner = owner
        self.acquired = False
        self.holder: str | None = None
        self.lease: Any = None
        self._taken_at = 0.0

    def __bool__(self) -> bool:
        return self.acquired

    def _fresh(self) -> Exclusive:
        return Exclusive(
            self._provider,
            self.name,
            at_most_for=timedelta(milliseconds=self._most),
            at_least_for=timedelta(milliseconds=self._least),
            owner=self._owner,
        )

    # -- decorator -----------------------------------------------------------------------

    def __call__(self, fn: F) -> F:
        if not callable(fn):
            raise LeaseTypeError("exclusive(...) decorates a function")
        is_async_fn = inspect.iscoroutinefunction(fn)
        if self._async or is_async_fn:

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                async with self._fresh() as run:
                    if not run:
                        return None
                    if is_async_fn:
                        return await fn(*args, **kwargs)
                    return await asyncio.to_thread(fn, *args, **kwargs)

            return run_async  # type: ignore[return-value]

        @functools.wraps(fn)
        def run_sync(*args: Any, **kwargs: Any) -> Any:
            with self._fresh() as run:
                if not run:
                    return None
                return fn(*args, **kwargs)

        return run_sync  # type: ignore[return-value]

    # -- sync context manager --------------------------------------------------------------

    def _hold(self) -> Any:
        self.owner = self._owner or default_owner()
        return self._provider.hold(self.name, self.owner, self._most)

    def _skipped(self, exc: LeaseNotAcquired) -> None:
        self.holder = exc.holder
        logger.info(
            "skipped %r: held by %r%s",
            self.name,
            exc.holder,
            f" until {exc.expires_at.isoformat()}" if exc.expires_at is not None else "",
        )

    def _left_ms(self) -> int:
        return self._least - int((monotonic() - self._taken_at) * 1000)

    def __enter__(self) -> Self:
        if self._async:
            raise TypeError("the async provider needs `async with exclusive(...)`")
        lease = self._hold()
        self._taken_at = monotonic()  # before the request: at_least_for never overshoots
        try:
            lease.__enter__()
        except LeaseNotAcquired as exc:
            self._skipped(exc)
            return self
        self.lease, self.acquired = lease, True
        logger.info("running %r as %r (fence %s)", self.name, self.owner, lease.fence)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if not self.acquired:
            return None
        left = self._left_ms()
        if left > 0 and self.lease.held:
            try:
                self.lease.transfer_to(f"{self.owner}:at-least", left)
            except Exception as error:  # the lease is then released on exit, as without it
                logger.warning("keeping %r for at_least_for failed: %s", self.name, error)
        return self.lease.__exit__(exc_type, exc, tb)  # type: ignore[no-any-return]

    # -- async context manager -----------------------------------------------------------

    async def __aenter__(self) -> Self:
        lease = self._hold()
        self._taken_at = monotonic()
        try:
            if self._async:
                await lease.__aenter__()
            else:
                await asyncio.to_thread(lease.__enter__)
        except LeaseNotAcquired as exc:
            self._skipped(exc)
            return self
        self.lease, self.acquired = lease, True
        logger.info("running %r as %r (fence %s)", self.name, self.owner, lease.fence)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if not self.acquired:
            return None
        lease = self.lease
        left = self._left_ms()
        if left > 0 and lease.held:
            try:
                if self._async:
                    await lease.transfer_to(f"{self.owner}:at-least", left)
                else:
                    await asyncio.to_thread(lease.transfer_to, f"{self.owner}:at-least", left)
            except Exception as error:
                logger.warning("keeping %r for at_least_for failed: %s", self.name, error)
        if self._async:
            return await lease.__aexit__(exc_type, exc, tb)  # type: ignore[no-any-return]
        return await asyncio.to_thread(lease.__exit__, exc_type, exc, tb)


def exclusive(
    provider: HoldingProvider,
    name: str,
    *,
    at_most_for: Duration,
    at_least_for: Duration = _NO_TIME,
    owner: str | None = None,
) -> Exclusive:
    """Run a job under the lease ``name`` on one replica at a time; skip it elsewhere.

    A decorator (each call is one run) and a context manager (one run). ``at_most_for``: the
    lease's TTL, how long a crashed holder blocks the job (the lease is renewed while the job
    runs). ``at_least_for`` (default 0): how long after it was taken the lease is kept even
    when the job ended sooner; at most ``at_most_for``. Both a `timedelta` or a number of
    seconds. ``owner`` defaults to a unique ``host:pid:random`` per run. Validated at once.
    """
    return Exclusive(
        provider, name, at_most_for=at_most_for, at_least_for=at_least_for, owner=owner
    )
