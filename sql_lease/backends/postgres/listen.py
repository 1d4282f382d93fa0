"""PostgreSQL's wake-up source: the LISTEN connection that turns NOTIFYs into waiter wake-ups.

One dedicated asyncpg connection per provider, opened lazily when the first waiter needs it:
it is opened through a fresh copy of the provider's SQLAlchemy pool (`Pool.recreate`: the
engine's connect arguments, TLS, server settings, credentials and pool events) and then
detached, so it never waits for, nor occupies, a slot of the pool the provider's calls share:
a burst of calls that has every slot checked out cannot starve the listener. It LISTENs on
the table's channel; each notification's payload is the hex of the key's bytes and wakes one
waiter of that key. A lost connection is reopened with backoff
while anyone waits, and every reconnect wakes the sleeping waiters (notifications may have
been missed meanwhile). A cheap ``SELECT 1`` every `HEALTH_S` seconds catches half-open
connections. With no waiters left the connection is kept for `LINGER_S` seconds, then closed;
`close` ends it at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import TYPE_CHECKING, cast

import asyncpg
from sqlalchemy.util import greenlet_spawn

if TYPE_CHECKING:
    from sqlalchemy.pool import Pool

    from ...capabilities import WakeupSink

__all__ = ["HEALTH_S", "LINGER_S", "Listener"]

logger = logging.getLogger("sql_lease.wait")

LINGER_S = 30.0  # keep listening this long after the last waiter left
HEALTH_S = 15.0  # probe the connection this often while anyone waits
_BACKOFF_S = (0.05, 5.0)  # first and largest delay between reconnect attempts
_CLOSE_S = 2.0  # bound on closing the connection gracefully


class Listener:
    """LISTEN on one provider's channel for the waiters of its `Hub` (a `WakeupSource`).

    ``generation`` counts successful connections; ``connected`` tells whether one is up;
    ``notifications`` counts what arrived.
    """

    def __init__(self, pool: Pool, channel: str, timeout: float, hub: WakeupSink) -> None:
        self._pool = pool
        self._timeout = timeout
        self._hub = hub
        self._channel = channel
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Event | None = None
        self._poke: asyncio.Event | None = None
        self.connected = False
        self.generation = 0
        self.notifications = 0
        self.server_pid: int | None = None  # backend of the current connection (diagnostics)

    async def ready(self, within: float) -> bool:
        """Start listening if needed; True once LISTEN is active (False after ``within`` s)."""
        task = self._task
        if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
            self._ready, self._poke = asyncio.Event(), asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="sql_lease listener"
            )
        assert self._ready is not None
        if self._ready.is_set():
            return True
        try:
            async with asyncio.timeout(within):
                await self._ready.wait()
        except TimeoutError:
            return False
        return True

    def poke(self) -> None:
        """Have the listener re-check whether it is still needed."""
        if self._poke is not None:
            self._poke.set()

    async def close(self) -> None:
        """Stop listening and close the connection now."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        failures = 0
        while self._hub.active:
            try:
                conn = await self._connect()
            except Exception as exc:
                failures += 1
                delay = min(_BACKOFF_S[1], _BACKOFF_S[0] * 2 ** (failures - 1))
                log = logger.warning if failures == 1 else logger.debug
                log("listener could not connect (%s); retrying in %.2f s", exc, delay)
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
                continue
            failures = 0
            try:
                await self._serve(conn)
            finally:
                self.connected = False
                assert self._ready is not None
                self._ready.clear()
                await _close(conn)
            if self._hub.active:
                await asyncio.sleep(_BACKOFF_S[0])  # lost while needed: a breath, then again

    async def _connect(self) -> asyncpg.Connection:
        async with asyncio.timeout(self._timeout):
            # Not the shared pool itself: its slots may all be out (held by a burst of calls).
            fairy = await greenlet_spawn(self._pool.recreate().connect)
            conn = cast("asyncpg.Connection", fairy.driver_connection)
            fairy.detach()  # ours now: the pool forgets it and its slot is free
            try:
                if conn.is_closed():
                    raise ConnectionError("the pooled connection was closed")
                await conn.add_listener(self._channel, self._on_notify)
            except BaseException:
                await _close(conn)
                raise
        return conn

    async def _serve(self, conn: asyncpg.Connection) -> None:
        assert self._ready is not None and self._poke is not None
        poke = self._poke
        conn.add_termination_listener(lambda _: poke.set())
        loop = asyncio.get_running_loop()
        self.generation += 1
        self.connected = True
        self.server_pid = conn.get_server_pid()
        self._ready.set()
        logger.debug("listening on %r (connection %d)", self._channel, self.generation)
        self._hub.wake_sleepers()
        idle_since: float | None = None
        while not conn.is_closed():
            if self._hub.active:
                idle_since = None
                wait = HEALTH_S
            else:
                idle_since = loop.time() if idle_since is None else idle_since
                wait = LINGER_S - (loop.time() - idle_since)
                if wait <= 0:
                    return
            poke.clear()
            try:
                async with asyncio.timeout(wait):
                    await poke.wait()
                continue
            except TimeoutError:
                pass
            if self._hub.active and not await _healthy(conn, self._timeout):
                logger.warning("listener connection is not answering: reconnecting")
                return
        logger.warning("listener connection lost: reconnecting")

    def _on_notify(self, conn: object, pid: int, channel: str, payload: object) -> None:
        self.notifications += 1
        try:
            key = bytes.fromhex(str(payload)).decode("utf-8", "surrogatepass")
        except ValueError:
            return
        self._hub.notify(key)


async def _healthy(conn: asyncpg.Connection, seconds: float) -> bool:
    try:
        async with asyncio.timeout(seconds):
            await conn.fetchval("SELECT 1")
    except Exception:
        return False
    return True


async def _close(conn: asyncpg.Connection) -> None:
    if conn.is_closed():
        return
    try:
        await conn.close(timeout=_CLOSE_S)
    except asyncio.CancelledError:
        conn.terminate()
        raise
    except Exception:
        conn.terminate()
