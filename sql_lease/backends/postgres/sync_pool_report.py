"""Why psycopg's pool could not connect, told to the caller at once (`sql_lease.sync`).

psycopg_pool connects in the background and retries with a backoff: a caller waiting for a
connection saw only `PoolTimeout` at the end of its whole timeout, while the reason (a wrong
password, a missing database, a refused port, an unknown host) went to the ``psycopg.pool``
log, once per attempt. Here the pool's connection class (`reporting_class`) records each
attempt in a `ConnectReport`, and how many of its connections are open; while the pool has
none, the executor waits in short slices and raises the recorded failure as soon as there is
one. With connections open (all busy), a failed attempt to add one (the server's connection
limit, say) is no reason to give up: the caller waits for one to come back, as before. The
pool's warning of each failed attempt of our pools is filtered out of its log: the error
carries it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Final

import psycopg

__all__ = ["POOL_NAME", "PROBE_S", "ConnectReport", "quiet_pool_log", "reporting_class"]

POOL_NAME: Final = "sql_lease"  #: the name of the pools `sql_lease.sync` opens
PROBE_S: Final = 0.05  #: how often a caller looks for a failure while the pool has none ready
_FAILED_ATTEMPT: Final = "error connecting in %r: %s"  # psycopg_pool's message


class ConnectReport:
    """The last failed connection attempt of one pool (until one succeeds), and how many of
    its connections are open."""

    __slots__ = ("_lock", "failure", "open")

    def __init__(self) -> None:
        self.failure: psycopg.OperationalError | None = None
        self.open = 0
        self._lock = threading.Lock()

    @property
    def settled(self) -> bool:
        """Connections are open: a caller may wait its whole timeout for one."""
        return self.open > 0

    def opened(self) -> None:
        with self._lock:
            self.open += 1
            self.failure = None

    def closed(self) -> None:
        with self._lock:
            self.open -= 1

    def check(self) -> None:
        """With no connection open, raise the recorded failure (a new error, the recorded one
        its cause), if any."""
        failure = self.failure
        if failure is not None and self.open <= 0:
            reason = " ".join(str(failure).split())  # libpq's lines (one per host tried)
            raise psycopg.OperationalError(reason) from failure


def reporting_class(base: type[Any], report: ConnectReport) -> type[Any]:
    """A subclass of the connection class ``base`` whose ``connect`` and ``close`` tell
    ``report``."""

    def connect(cls: type[Any], *args: Any, **kwargs: Any) -> Any:
        try:
            conn = super(reporting, cls).connect(*args, **kwargs)
        except psycopg.OperationalError as exc:
            report.failure = exc
            raise
        conn.reported_open = True
        report.opened()
        return conn

    def close(self: Any) -> None:
        if self.reported_open:
            self.reported_open = False
            report.closed()
        super(reporting, self).close()

    namespace = {"connect": classmethod(connect), "close": close, "reported_open": False}
    reporting: type[Any] = type(base.__name__, (base,), namespace)
    return reporting


class _QuietFailedAttempts(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        ours = isinstance(args, tuple) and bool(args) and args[0] == POOL_NAME
        return not (ours and record.msg == _FAILED_ATTEMPT)


_FILTER: Final = _QuietFailedAttempts()


def quiet_pool_log() -> None:
    """Filter the pool's per-attempt warnings of our pools (idempotent)."""
    log = logging.getLogger("psycopg.pool")
    if _FILTER not in log.filters:
        log.addFilter(_FILTER)
