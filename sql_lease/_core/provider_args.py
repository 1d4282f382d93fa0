"""The argument checks that the async and sync providers' constructors and ``from_url`` share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..errors import LeaseTypeError, LeaseValueError
from .validate import check_identifier

if TYPE_CHECKING:
    from ..backends import Backend

__all__ = ["MAX_SECONDS", "POOLERS", "check_bool", "check_pooler", "check_seconds", "check_table"]

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
