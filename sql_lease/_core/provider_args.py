"""What the async and sync SQL providers share about their settings: the argument checks of
their constructors and ``from_url`` (`check_url_options`: one call, one `UrlOptions`), their
defaults, the settings they show (`ProviderSettings`) and the log line that says how their
waiters learn of releases (`log_wake_ups`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from time import monotonic
from typing import TYPE_CHECKING, Final

from ..errors import LeaseTypeError, LeaseValueError
from ..observer import LeaseObserver, check_observer
from .validate import check_identifier
from .waiting import POLL_S

if TYPE_CHECKING:
    from ..backends import Backend

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "MAX_SECONDS",
    "POOLERS",
    "ProviderSettings",
    "UrlOptions",
    "check_bool",
    "check_pooler",
    "check_seconds",
    "check_table",
    "check_url_options",
    "log_wake_ups",
]

#: Seconds that bound each call end to end, and each connection attempt, by default.
DEFAULT_TIMEOUT: Final = 5.0
DEFAULT_CONNECT_TIMEOUT: Final = 5.0

_wait_logger = logging.getLogger("sql_lease.wait")

MAX_SECONDS: Final = 86_400.0
#: ``from_url``'s ``pooler`` values: none, or the pooler's pool mode.
POOLERS: Final = (None, "transaction", "session")


def check_seconds(what: str, value: object) -> float:
    """A number of seconds above 0 and at most a day."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise LeaseTypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    if not (0 < value <= MAX_SECONDS):
        raise LeaseValueError(
            f"{what} must be a number of seconds above 0 and at most {MAX_SECONDS:.0f} "
            f"(one day), not {value!r}"
        )
    return float(value)


def check_bool(what: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise LeaseTypeError(f"{what} must be a bool")
    return value


def check_table(table_name: str, schema: str | None, backend: Backend | None = None) -> None:
    """``table_name`` and ``schema`` are identifiers; a backend without schemas takes none."""
    check_identifier("table_name", table_name)
    if schema is not None:
        check_identifier("schema", schema)
        if backend is not None and not backend.has_schemas:
            raise LeaseValueError(f"{backend.title} has no schemas: leave schema=None")


def check_pooler(pooler: object, synchronous_commit: object) -> str | None:
    """``pooler`` is one of `POOLERS`; ``synchronous_commit=False`` (a startup parameter)
    cannot go through one."""
    if not (pooler is None or (isinstance(pooler, str) and pooler in POOLERS)):
        raise LeaseValueError(f'pooler must be None, "transaction" or "session", not {pooler!r}')
    if pooler is not None and synchronous_commit is False:
        raise LeaseValueError(
            "synchronous_commit=False cannot be sent through a pooler (it is a startup "
            "parameter): set it for the role instead (ALTER ROLE ... SET synchronous_commit "
            "= off) and leave synchronous_commit=True"
        )
    return pooler


@dataclass(frozen=True, slots=True)
class UrlOptions:
    """The settings ``from_url`` takes in both APIs, checked (`check_url_options`)."""

    timeout: float
    connect_timeout: float
    synchronous_commit: bool
    pooler: str | None
    observer: LeaseObserver | None


def check_url_options(
    table_name: str,
    schema: str | None,
    timeout: object,
    connect_timeout: object,
    synchronous_commit: object,
    pooler: object,
    observer: object,
) -> UrlOptions:
    """``from_url``'s settings checked before any I/O, the async and sync ones alike."""
    checked_pooler = check_pooler(pooler, synchronous_commit)
    commit = check_bool("synchronous_commit", synchronous_commit)
    checked_observer = check_observer(observer)
    seconds = check_seconds("timeout", timeout)
    connect_seconds = check_seconds("connect_timeout", connect_timeout)
    check_table(table_name, schema)
    return UrlOptions(seconds, connect_seconds, commit, checked_pooler, checked_observer)


def log_wake_ups(listen_where: str | None, polls: bool) -> None:
    """Say (on ``sql_lease.wait``) where waiters listen, or that they poll behind a
    transaction pooler."""
    if listen_where is not None:
        _wait_logger.info("waiters listen for notifications on %s", listen_where)
    elif polls:
        _wait_logger.info(
            "behind a transaction pooler without listen_url: waiters poll every %s s", POLL_S
        )


class ProviderSettings:
    """The settings a SQL provider shows (both APIs): table, schema, timeout, observer."""

    _table_name: str
    _schema: str | None
    _timeout: float
    _observer: LeaseObserver | None

    @property
    def table_name(self) -> str:
        return self._table_name

    @property
    def schema(self) -> str | None:
        return self._schema

    @property
    def timeout(self) -> float:
        """Seconds that bound each call end to end."""
        return self._timeout

    @property
    def observer(self) -> LeaseObserver | None:
        """The observer given at construction, or None."""
        return self._observer

    def _left(self, started: float) -> float:
        """Seconds left of a call's timeout that started at ``started`` (`monotonic`)."""
        return self._timeout - (monotonic() - started)
