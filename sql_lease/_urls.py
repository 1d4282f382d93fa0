"""Database URLs as users keep them: normalised to the async driver, never shown with a password."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from .errors import LeaseValueError

__all__ = ["build_engine", "normalize_url", "redact"]

_POSTGRES_ALIASES = frozenset({"postgresql", "postgres", "postgresql+asyncpg", "postgres+asyncpg"})


def normalize_url(url: str | URL) -> URL:
    """Parse ``url``: ``postgresql://``/``postgres://`` become ``postgresql+asyncpg://`` and
    ``sqlite:///path`` becomes ``sqlite+aiosqlite:///path`` (a file; memory is refused).

    Percent-encoded passwords are decoded by the parser; a libpq-style ``sslmode`` query
    parameter becomes asyncpg's ``ssl``, and the libpq TLS file and version parameters
    (``sslrootcert``, ``sslcert``, ``sslkey``, ``sslpassword``, ``sslcrl``...) reach asyncpg
    through its ``dsn`` argument, the only way it takes them. Raises `LeaseValueError` for
    anything else.
    """
    try:
        parsed = url if isinstance(url, URL) else make_url(url)
    except (ArgumentError, ValueError, TypeError) as exc:
        # The parser's message can quote the URL, password included: keep it out.
        raise LeaseValueError(
            f"not a valid database URL ({type(exc).__name__}); expected "
            "postgresql://user:password@host:port/db or sqlite:///path.db"
        ) from None
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
    tls = {name: parsed.query[name] for name in _DSN_ONLY if name in parsed.query}
    if tls and "dsn" not in parsed.query:
        for name, value in tls.items():
            if not isinstance(value, str):
                raise LeaseValueError(f"the URL gives {name} more than once")
        # asyncpg merges this DSN with the host, user... given as arguments (which win).
        dsn = "postgresql://?" + urlencode(tls)
        parsed = parsed.difference_update_query(list(tls)).update_query_dict({"dsn": dsn})
    return parsed


#: libpq parameters asyncpg reads from a DSN only (not as keyword arguments).
_DSN_ONLY = (
    "sslcert",
    "sslkey",
    "sslrootcert",
    "sslcrl",
    "sslpassword",
    "sslnegotiation",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
)


_SECRET_PARAMS = frozenset({"password", "sslpassword", "passfile"})


def redact(url: URL) -> str:
    """The URL as text with its password masked, also when given as a query parameter.

    Parameters carried in a ``dsn`` (see `normalize_url`) are shown as plain parameters again.
    """
    dsn = url.query.get("dsn")
    if isinstance(dsn, str) and dsn.startswith("postgresql://?"):
        inner = dict(parse_qsl(dsn.partition("?")[2], keep_blank_values=True))
        url = url.difference_update_query(["dsn"]).update_query_dict(inner)
    secrets = [name for name in url.query if name.lower() in _SECRET_PARAMS]
    if secrets:
        url = url.update_query_dict(dict.fromkeys(secrets, "***"))
    return url.render_as_string(hide_password=True)


def build_engine(url: URL, **kwargs: Any) -> AsyncEngine:
    """`create_async_engine`, with bad URL options reported as `LeaseValueError`."""
    try:
        return create_async_engine(url, **kwargs)
    except (ArgumentError, ValueError, TypeError) as exc:
        raise LeaseValueError(
            f"cannot build an engine for {redact(url)}: {type(exc).__name__} in its options"
        ) from None
