"""Providers across ``os.fork()``: the child gets a clear error, the parent is left alone.

A SQL provider's connections, pool, event loop and threads belong to the process that made it.
In a process forked after it was made (multiprocessing's default start method on Linux,
gunicorn ``--preload``, Celery's prefork pool) they are copies of the parent's: a statement
sent there goes over the parent's socket, and closing one there (asyncpg's ``terminate``,
SQLAlchemy's invalidation) sends the server a goodbye or unregisters the socket from the
parent's ``epoll``, so the parent's next call hangs. So, at a fork, the child marks every SQL
provider it inherited (`ForkAware`) as closed and forked: each call raises `LeaseForkedError`
(a `LeaseClosedError`) before any I/O, and ``aclose``/``close`` in the child release nothing
of the parent's. The fix is to create the provider after the fork, in the child. The hook
costs nothing per call: it sets the ``_closed`` flag every call already tests.
"""

from __future__ import annotations

import os
import weakref
from typing import Final

from ..errors import LeaseClosedError, LeaseForkedError

__all__ = ["ForkAware", "closed_error"]


class ForkAware:
    """Mixin of the providers whose resources belong to one process (the SQL ones).

    It owns two attributes: ``_closed`` (no more calls; the provider sets it False in
    ``__init__`` and True when closed, the fork hook sets it True in a child) and
    ``_forked_from`` (the pid of the process that made the provider, in a forked child).
    """

    _closed: bool
    _forked_from: int | None = None

    def _watch_forks(self) -> None:
        """Call from ``__init__``: mark this provider in every process forked from now on."""
        _LIVE[self] = os.getpid()

    @property
    def forked(self) -> bool:
        """True in a process forked after this provider was made: it makes no calls there."""
        return self._forked_from is not None

    def _closed_error(self, operation: str) -> LeaseClosedError:
        """The error of a call on a closed provider: `LeaseForkedError` after a fork."""
        if self._forked_from is not None:
            return LeaseForkedError(operation, self._forked_from)
        return LeaseClosedError(operation)


def closed_error(provider: object, operation: str) -> LeaseClosedError:
    """`ForkAware._closed_error` for any provider (another kind is simply closed)."""
    if isinstance(provider, ForkAware):
        return provider._closed_error(operation)
    return LeaseClosedError(operation)


#: Every live fork-aware provider, with the pid of the process that made it.
_LIVE: Final[weakref.WeakKeyDictionary[ForkAware, int]] = weakref.WeakKeyDictionary()
#: In a child, the inherited providers, kept alive: collected, their connections' finalizers
#: would close the parent's sockets (and unregister them from the parent's ``epoll``).
_INHERITED: Final[list[ForkAware]] = []


def _after_fork_in_child() -> None:
    for provider, pid in list(_LIVE.items()):
        provider._forked_from = pid
        provider._closed = True
        _INHERITED.append(provider)
    _LIVE.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
