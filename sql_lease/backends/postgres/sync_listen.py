"""The LISTEN thread of the sync PostgreSQL provider (psycopg): NOTIFYs become wake-ups.

One dedicated psycopg connection in its own thread, opened when the first waiter needs it and
kept `LINGER_S` seconds after the last one leaves. Each notification's payload is the hex of
a key's bytes and wakes one waiter of that key. A lost connection is reopened with backoff
while anyone waits, and every reconnect wakes the sleeping waiters (notifications may have
been missed meanwhile). Notifications are hints: waiters also re-check at the holder's expiry.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
from time import monotonic
from typing import TYPE_CHECKING, Any, Final

import psycopg
from psycopg import sql

if TYPE_CHECKING:
    from ...capabilities import WakeupSink

__all__ = ["LINGER_S", "Listener"]

logger = logging.getLogger("sql_lease.wait")

LINGER_S: Final = 30.0  # keep listening this long after the last waiter left
_POLL_S: Final = 0.2  # how often the thread looks up from the socket (stop, idle, health)
_HEALTH_S: Final = 15.0  # probe the connection this often while anyone waits
_BACKOFF_S: Final = (0.05, 5.0)


class Listener:
    """LISTEN on ``channel`` for the waiters of ``hub``; ``generation`` counts connections."""

    def __init__(self, channel: str, connect_kwargs: dict[str, Any], hub: WakeupSink) -> None:
        self._channel = channel
        self._kwargs = connect_kwargs
        self._hub = hub
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop = threading.Event()
        self.connected = False
        self.generation = 0
        self.notifications = 0

    def ready(self, within: float) -> bool:
        """Start listening if needed; True once LISTEN is active (False after ``within`` s)."""
        with self._lock:
            if self._stop.is_set():
                return False
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sql_lease listener", daemon=True
                )
                self._thread.start()
        return self._ready.wait(within)

    def close(self, timeout: float = 2.0) -> None:
        """Stop listening and close the connection (waits up to ``timeout`` s)."""
        self._stop.set()
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        failures = 0
        try:
            while not self._stop.is_set():
                try:
                    conn = psycopg.connect(**self._kwargs)
                except psycopg.Error as exc:
                    failures += 1
                    delay = min(_BACKOFF_S[1], _BACKOFF_S[0] * 2 ** (failures - 1))
                    log = logger.warning if failures == 1 else logger.debug
                    log("listener could not connect (%s); retrying in %.2f s", exc, delay)
                    if self._stop.wait(delay * random.uniform(0.5, 1.0)) or not self._hub.active:
                        return
                    continue
                failures = 0
                try:
                    if not self._serve(conn):
                        return
                finally:
                    self.connected = False
                    self._ready.clear()
                    with contextlib.suppress(Exception):
                        conn.close()
                if not self._hub.active or self._stop.wait(_BACKOFF_S[0]):
                    return
        finally:
            with self._lock:
                self._thread = None

    def _serve(self, conn: psycopg.Connection[Any]) -> bool:
        """Listen until the connection fails (True: reconnect) or is no longer needed."""
        try:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
        except psycopg.Error as exc:
            logger.warning("listener could not LISTEN (%s)", exc)
            return True
        self.generation += 1
        self.connected = True
        self._ready.set()
        self._hub.wake_sleepers()
        idle_since: float | None = None
        probed = monotonic()
        while not self._stop.is_set():
            try:
                for note in conn.notifies(timeout=_POLL_S):
                    self.notifications += 1
                    self._notify(note.payload)
                now = monotonic()
                if self._hub.active:
                    idle_since = None
                    if now - probed >= _HEALTH_S:
                        conn.execute("SELECT 1")
                        probed = now
                else:
                    idle_since = now if idle_since is None else idle_since
                    if now - idle_since >= LINGER_S:
                        return False
            except psycopg.Error as exc:
                logger.warning("listener connection lost (%s): reconnecting", exc)
                return True
        return False

    def _notify(self, payload: str) -> None:
        try:
            key = bytes.fromhex(payload).decode("utf-8", "surrogatepass")
        except ValueError:
            return
        self._hub.notify(key)
