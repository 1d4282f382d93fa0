"""Connections for the provider's statements, taken from the engine's SQLAlchemy pool.

Checking a connection out of SQLAlchemy's async pool and back in costs two greenlet switches
per call, more than the statement itself on a fast network. The provider therefore keeps the
connections it has used checked out and reuses them directly: never more than the pool's size
plus overflow (callers beyond that wait here for one to come back), each handed back to the
pool after `MAX_HOLD` seconds so that the pool's recycling and disposal still apply.

A provider that owns its engine keeps idle connections too. With an engine the caller owns
(and shares with other work), connections are kept only while other calls of the provider are
in flight: the call that leaves none in flight hands every connection back. A busy provider so
keeps what it uses, and an idle one holds nothing of the caller's pool (nothing is left checked
out when the caller disposes of the engine after its last call).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from time import monotonic
from typing import TYPE_CHECKING, Final

from sqlalchemy.pool import Pool, PoolProxiedConnection, QueuePool
from sqlalchemy.util import greenlet_spawn

if TYPE_CHECKING:
    from ..backends import Adaptor, CatalogueNow, Fetch

__all__ = ["Connections"]

MAX_HOLD: Final = 60.0  # seconds a connection stays out of the pool between returns


Pair = tuple[PoolProxiedConnection, "Fetch", float]  # (pool connection, its fetch, since)


class Connections:
    """Hands out (pool connection, its bound fetch, since) triples; see the module docstring.

    ``adapt`` (the backend's adaptor) turns each connection checked out of the pool into the
    fetch callable that statements are awaited on, for the statements of ``catalogue`` (the
    provider's as it is now); this module knows no driver.
    """

    __slots__ = (
        "_adapt",
        "_busy",
        "_catalogue",
        "_idle",
        "_limit",
        "_out",
        "_pool",
        "_shared",
        "_waiters",
    )

    def __init__(
        self, pool: Pool, *, shared: bool, adapt: Adaptor, catalogue: CatalogueNow
    ) -> None:
        """``shared``: the pool is the caller's; keep connections only while calls overlap."""
        self._pool = pool
        self._adapt = adapt
        self._catalogue = catalogue
        self._shared = shared
        # Holding needs a known bound on the pool: a QueuePool's size plus overflow.
        self._limit: int | None = None
        if isinstance(pool, QueuePool) and pool._max_overflow >= 0:
            self._limit = pool.size() + pool._max_overflow
        self._out = 0  # connections checked out of the pool by us, busy or idle
        self._busy = 0  # of those, the ones a call is using
        self._idle: list[Pair] = []
        self._waiters: deque[asyncio.Future[None]] = deque()

    def take(self) -> Pair | None:
        """An idle held connection, without waiting (the hot path), or None."""
        if not self._idle:
            return None
        self._busy += 1
        return self._idle.pop()

    async def get(self) -> Pair:
        """A connection: an idle one, a new one from the pool, or the next one given back.

        The caller bounds the wait (and checks that the connection is still open).
        """
        while not self._idle and self._limit is not None and self._out >= self._limit:
            await self._wait()
        pair = self.take()
        return pair if pair is not None else await self._checkout()

    async def _checkout(self) -> Pair:
        self._out += 1
        self._busy += 1
        try:
            fairy = await greenlet_spawn(self._pool.connect)
        except BaseException:
            self._out -= 1
            self._busy -= 1
            self._wake()
            raise
        return fairy, self._adapt(fairy, self._catalogue), monotonic()

    async def _wait(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._wake()  # we were woken but leave: pass the turn on
            raise
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def keep(self, fairy: PoolProxiedConnection, fetch: Fetch, since: float) -> bool:
        """A call is done with a healthy connection: keep it for the next call (True), or
        False when the caller must `give_back` it."""
        self._busy -= 1
        if (
            self._limit is not None
            and (self._busy or not self._shared)
            and monotonic() - since < MAX_HOLD
        ):
            self._idle.append((fairy, fetch, since))
            if self._waiters:
                self._wake()
            return True
        return False

    async def give_back(self, fairy: PoolProxiedConnection) -> None:
        """Return a connection `keep` did not keep to the pool (and, on a shared pool with no
        call left in flight, every idle one with it)."""
        await self._return(fairy)
        await self._release_when_unused()

    async def put(self, fairy: PoolProxiedConnection, fetch: Fetch, since: float) -> None:
        """Take back a healthy connection after a call (keep it, or return it to the pool)."""
        if not self.keep(fairy, fetch, since):
            await self.give_back(fairy)

    async def drop(self, fairy: PoolProxiedConnection) -> None:
        """Discard a broken connection (the pool opens a new one when needed)."""
        self._busy -= 1
        # In a greenlet: closing an async driver's connection (psycopg's) awaits; called
        # bare, SQLAlchemy logs MissingGreenlet and leaves the socket to the garbage collector.
        await greenlet_spawn(fairy.invalidate)
        await self._return(fairy)
        await self._release_when_unused()

    async def _return(self, fairy: PoolProxiedConnection) -> None:
        """Hand ``fairy`` to the pool; it counts as ours (``_out``) until the pool has it."""
        try:
            await greenlet_spawn(fairy.close)
        finally:
            self._out -= 1
            self._wake()

    async def _release_when_unused(self) -> None:
        """On a shared pool, hand every idle connection back once no call is in flight."""
        if self._shared and not self._busy and self._idle:
            await self.close()

    def start_over(self, pool: Pool) -> None:
        """For a new event loop, the old one finished: forget the held connections (of the old
        loop, closed with it; nothing can be sent on them, not even a goodbye) and take them
        from ``pool`` from now on."""
        self._pool = pool
        for fairy, _, _ in self._idle:
            fairy.detach()  # no longer the pool's: collected without a `terminate`
        self._idle = []
        self._out = self._busy = 0
        self._waiters.clear()

    async def shutdown(self, within: float) -> None:
        """For the provider's ``aclose``: keep nothing from now on, return the idle connections,
        and wait up to ``within`` seconds for calls in flight to give theirs back."""
        self._limit = None  # `keep` declines from now on: every call gives its connection back
        await self.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                while self._out:
                    await self._wait()

    async def close(self) -> None:
        """Return every idle connection to the pool."""
        idle, self._idle = self._idle, []
        for fairy, _, _ in idle:
            await self._return(fairy)
