"""PostgreSQL URLs as ``from_url`` takes them: checked and set to asyncpg (no driver import)."""

from __future__ import annotations

from typing import Final
from urllib.parse import urlencode

from sqlalchemy.engine import URL

from ...errors import LeaseValueError
from .libpq import DSN_ONLY, DSN_PREFIX, check_query

__all__ = ["SCHEMES", "TWO_ATS", "check_port", "host_port", "normalize_url"]

SCHEMES: Final = frozenset({"postgresql", "postgres", "postgresql+asyncpg", "postgres+asyncpg"})

TWO_ATS: Final = (
    "the database URL has more than one '@': percent-encode every '@' but the one before the "
    "host as %40, in the user name, the password or a parameter (postgresql://user:p%40ss@host/db)"
)


def normalize_url(parsed: URL) -> URL:
    """``parsed`` as ``postgresql+asyncpg``: ``sslmode`` becomes asyncpg's ``ssl``, and the
    TLS file and version parameters reach asyncpg through its ``dsn`` argument, the only way
    it takes them; any query parameter that is not one of `sql_lease.backends.postgres.libpq`'s
    raises."""
    if "@" in (parsed.host or ""):
        raise LeaseValueError(TWO_ATS)
    if parsed.port is not None:
        check_port(str(parsed.port))
    parsed = parsed.set(drivername="postgresql+asyncpg", query=check_query(parsed.query))
    if "sslmode" in parsed.query and "ssl" not in parsed.query:
        parsed = parsed.update_query_dict({"ssl": parsed.query["sslmode"]}).difference_update_query(
            ["sslmode"]
        )
    parsed = parsed.difference_update_query(["sslmode"])
    tls = {name: parsed.query[name] for name in DSN_ONLY if name in parsed.query}
    if tls and "dsn" not in parsed.query:
        # asyncpg merges this DSN with the host, user... given as arguments (which win).
        dsn = DSN_PREFIX + urlencode(tls)
        parsed = parsed.difference_update_query(list(tls)).update_query_dict({"dsn": dsn})
    return parsed


def check_port(text: str) -> int | None:
    """A port from 1 to 65535, or None when empty (the default port)."""
    if not text:
        return None
    if not text.isdigit():
        raise LeaseValueError(
            "the port in the database URL is not a number (if the password has an '@', "
            "percent-encode it as %40)"
        )
    port = int(text)
    if not 1 <= port <= 65535:
        raise LeaseValueError("the port in the database URL is out of range: use 1 to 65535")
    return port


def host_port(token: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port``, the port checked."""
    if token.startswith("["):
        host, bracket, tail = token[1:].partition("]")
        if not bracket or (tail and not tail.startswith(":")):
            raise LeaseValueError("the database URL has an unclosed '[' in its host")
        return host, check_port(tail[1:])
    host, _, port = token.partition(":")
    return host, check_port(port)
