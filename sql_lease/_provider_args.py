"""The argument checks that the async and sync providers' constructors and ``from_url`` share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ._validate import check_identifier
from .errors import LeaseTypeError, LeaseValueError

if TYPE_CHECKING:
    from .backends import Backend

__all__ = ["MAX_SECONDS", "check_bool", "check_seconds", "check_table"]

MAX_SECONDS: Final = 86_400.0


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
