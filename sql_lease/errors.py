"""The exception hierarchy: everything the library raises on purpose is a `LeaseError`.

Subclasses also inherit the matching builtin (`TypeError`, `ValueError`, `TimeoutError`,
`ConnectionError`) so that both styles of ``except`` work. Contention is never an exception:
a lost acquire race is an `AcquireResult` with ``acquired=False``.
"""

from __future__ import annotations

from datetime import datetime

__all__ = [
    "LeaseAlreadyHeld",
    "LeaseClosedError",
    "LeaseConnectionError",
    "LeaseDatabaseError",
    "LeaseError",
    "LeaseForeignRowError",
    "LeaseForkedError",
    "LeaseLimitMismatchError",
    "LeaseLost",
    "LeaseNotAcquired",
    "LeaseSchemaError",
    "LeaseTimeoutError",
    "LeaseTypeError",
    "LeaseValueError",
]


class LeaseError(Exception):
    """Root of every error that sql_lease raises on purpose."""


class LeaseTypeError(LeaseError, TypeError):
    """An argument has the wrong type (raised before any I/O; nothing changed)."""


class LeaseValueError(LeaseError, ValueError):
    """An argument has the right type but an invalid value (raised before any I/O)."""


class LeaseLimitMismatchError(LeaseValueError):
    """A counting call (``limit=``) on a key whose live holders agreed on another limit (a
    plain lease counts as ``limit=1``). Nothing changed. ``key``, ``limit`` (the call's) and
    ``held_limit`` (the holders') are attributes."""

    def __init__(self, key: str, limit: int, held_limit: int) -> None:
        super().__init__(
            f"key {key!r} is held with limit={held_limit}; this call asked for limit={limit}:"
            " every holder of a key must use the same limit"
        )
        self.key = key
        self.limit = limit
        self.held_limit = held_limit


class LeaseClosedError(LeaseError, RuntimeError):
    """The provider was closed (``aclose``); it makes no more calls (raised before any I/O)."""

    def __init__(self, operation: str) -> None:
        super().__init__(f"{operation}: provider is closed")
        self.operation = operation


class LeaseForkedError(LeaseClosedError):
    """The provider was made in another process, which then forked this one: its connections
    are that process's, so it makes no calls here (raised before any I/O). Create the
    provider after the fork, in this process. ``parent_pid`` is the process that made it."""

    def __init__(self, operation: str, parent_pid: int) -> None:
        LeaseError.__init__(
            self,
            f"{operation}: this provider was created in process {parent_pid}, which then "
            "forked this one; its connections belong to that process: create the provider "
            "after the fork, in this process",
        )
        self.operation = operation
        self.parent_pid = parent_pid


class LeaseDatabaseError(LeaseError):
    """The database failed to carry out an operation.

    ``operation`` names the provider method. ``outcome_unknown`` is True when the statement
    may have reached the server before the failure (the connection broke or the client timed
    out mid-flight): the change may or may not have been applied. Every lease operation is
    safe to retry with the same arguments; see the README's "Failures" section for what a
    retry returns. The driver's exception is always chained as ``__cause__``.
    """

    def __init__(self, message: str, *, operation: str = "", outcome_unknown: bool = False):
        super().__init__(message)
        self.operation = operation
        self.outcome_unknown = outcome_unknown


class LeaseConnectionError(LeaseDatabaseError, ConnectionError):
    """The database could not be reached, or the connection broke."""


class LeaseTimeoutError(LeaseDatabaseError, TimeoutError):
    """The operation did not finish within its configured timeout."""


class LeaseForeignRowError(LeaseDatabaseError, ValueError):
    """A row of the leases table holds a key or owner that is not UTF-8 (it was written by
    another tool): it names no string this library could return.

    ``key`` is the row's key (bytes; None when the statement did not return it and the caller
    gave none), ``column`` ``"key"`` or ``"owner"``, ``value`` the bytes that failed. The
    message names the key in hex. A read that meets such a row raises this; `list_leases`
    shows the row as a `ForeignLease` instead and goes on.
    """

    def __init__(self, key: bytes | None, column: str, value: bytes, *, operation: str = ""):
        self.key, self.column, self.value = key, column, value
        named = "an unknown key" if key is None else f"key {key.hex()} (hex)"
        super().__init__(
            f"the lease row of {named} has a {column} that is not UTF-8 ({value.hex()} in hex):"
            " written by another tool; read or delete it with SQL",
            operation=operation,
        )

    def of_key(self, key: bytes) -> LeaseForeignRowError:
        """The same error naming ``key`` (for a row whose statement returned no key)."""
        return LeaseForeignRowError(key, self.column, self.value, operation=self.operation)


class LeaseSchemaError(LeaseDatabaseError):
    """The leases table is missing or not at the schema version this library needs."""


class LeaseNotAcquired(LeaseError):
    """`hold` could not acquire ``key``: ``holder`` holds it (until ``expires_at``)."""

    def __init__(
        self,
        key: str,
        owner: str,
        holder: str | None,
        fence: int | None = None,
        expires_at: datetime | None = None,
    ) -> None:
        self.key, self.owner, self.holder = key, owner, holder
        self.fence, self.expires_at = fence, expires_at
        super().__init__(self._message())

    def _message(self) -> str:
        until = f" until {self.expires_at.isoformat()}" if self.expires_at is not None else ""
        return f"lease {self.key!r} not acquired by {self.owner!r}: held by {self.holder!r}{until}"


class LeaseAlreadyHeld(LeaseNotAcquired):
    """`hold` refused: another hold of this provider already holds ``key`` for ``owner``.

    Two overlapping holds of one key by one owner would share one lease, and the first to
    leave would release it under the other. Give each run its own owner (e.g. hostname plus a
    run id). A `LeaseNotAcquired` (``holder`` is ``owner``), so ``except LeaseNotAcquired``
    skips the run as it would for another process's hold.
    """

    def __init__(self, key: str, owner: str) -> None:
        super().__init__(key, owner, owner)

    def _message(self) -> str:
        return (
            f"lease {self.key!r} is already held by {self.owner!r} through another hold() of "
            "this provider; overlapping holds need distinct owners"
        )


class LeaseLost(LeaseError):
    """A lease (or a guarded fence) is no longer held; ``reason`` says how it was found out."""

    def __init__(self, key: str, owner: str | None, fence: int | None, reason: str) -> None:
        self.key, self.owner, self.fence, self.reason = key, owner, fence, reason
        who = f" of {owner!r}" if owner is not None else ""
        super().__init__(f"lease {key!r}{who} (fence {fence}) was lost: {reason}")
