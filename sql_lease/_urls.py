"""Database URLs as users keep them: normalised to the async driver, never shown with a password."""

from __future__ import annotations

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from .errors import LeaseValueError

__all__ = ["normalize_url", "redact"]

_POSTGRES_ALIASES = frozenset({"postgresql", "postgres", "postgresql+asyncpg", "postgres+asyncpg"})


def normalize_url(url: str | URL) -> URL:
    """Parse ``url`` and map ``postgresql://``/``postgres://`` onto ``postgresql+asyncpg://``.

    Percent-encoded passwords are decoded by the parser; a libpq-style ``sslmode`` query
    parameter becomes asyncpg's ``ssl``. Raises `LeaseValueError` for anything else.
    """
    try:
        parsed = url if isinstance(url, URL) else make_url(url)
    except ArgumentError:
        raise LeaseValueError("not a database URL (expected postgresql://user@host/db)") from None
    if parsed.drivername not in _POSTGRES_ALIASES:
        raise LeaseValueError(
            f"unsupported database URL scheme {parsed.drivername!r}: "
            "use postgresql://, postgres:// or postgresql+asyncpg://"
        )
    parsed = parsed.set(drivername="postgresql+asyncpg")
    if "sslmode" in parsed.query and "ssl" not in parsed.query:
        parsed = parsed.update_query_dict({"ssl": parsed.query["sslmode"]}).difference_update_query(
            ["sslmode"]
        )
    return parsed


def redact(url: URL) -> str:
    """The URL as text with its password masked."""
    return url.render_as_string(hide_password=True)
