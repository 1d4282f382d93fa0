"""Database URLs as users keep them: normalised to the async driver, never shown with a password."""

from __future__ import annotations

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from .errors import LeaseValueError

__all__ = ["normalize_url", "redact"]

_POSTGRES_ALIASES = frozenset({"postgresql", "postgres", "postgresql+asyncpg", "postgres+asyncpg"})


def normalize_url(url: str | URL) -> URL:
    """Parse ``url``: ``postgresql://``/``postgres://`` become ``postgresql+asyncpg://`` and
    ``sqlite:///path`` becomes ``sqlite+aiosqlite:///path`` (a file; memory is refused).

    Percent-encoded passwords are decoded by the parser; a libpq-style ``sslmode`` query
    parameter becomes asyncpg's ``ssl``. Raises `LeaseValueError` for anything else.
    """
    try:
        parsed = url if isinstance(url, URL) else make_url(url)
    except ArgumentError:
        raise LeaseValueError("not a database URL (expected postgresql://user@host/db)") from None
    if parsed.drivername in ("sqlite", "sqlite+aiosqlite"):
        if parsed.database in (None, "", ":memory:") or "mode=memory" in str(parsed.query):
            raise LeaseValueError(
                "an in-memory SQLite database is private to one connection: use a file, "
                "sqlite:///path/to/leases.db (or InMemoryLeaseProvider within one process)"
            )
        return parsed.set(drivername="sqlite+aiosqlite")
    if parsed.drivername not in _POSTGRES_ALIASES:
        raise LeaseValueError(
            f"unsupported database URL scheme {parsed.drivername!r}: use postgresql://, "
            "postgres://, postgresql+asyncpg://, or sqlite:///path.db"
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
