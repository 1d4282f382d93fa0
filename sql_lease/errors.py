"""The exception hierarchy: everything the library raises on purpose is a `LeaseError`.

Subclasses also inherit the matching builtin (`TypeError`, `ValueError`, `TimeoutError`,
`ConnectionError`) so that both styles of ``except`` work. Contention is never an exception:
a lost acquire race is an `AcquireResult` with ``acquired=False``.
"""

from __future__ import annotations

__all__ = [
    "LeaseClosedError",
    "LeaseConnectionError",
    "LeaseDatabaseError",
    "LeaseError",
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


class LeaseClosedError(LeaseError, RuntimeError):
    """The provider was closed (``aclose``); it makes no more calls (raised before any I/O)."""

    def __init__(self, operation: str) -> None:
        super().__init__(f"{operation}: provider is closed")
        self.operation = operation


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


class LeaseSchemaError(LeaseDatabaseError):
    """The leases table is missing or not at the schema version this library needs."""
