"""PostgreSQL URLs as ``from_url`` takes them: checked and set to asyncpg (no driver import).

The backend's URL hooks (`sql_lease.backends._urls` asks them through the registry): libpq's
multi-host form (``postgresql://u@h1:5432,h2:5433/db``) moved to SQLAlchemy's ``?host=h1,h2&
port=5432,5433`` before parsing (`split_hosts`), shown again as libpq writes it with the
parameters asyncpg's ``dsn`` carries unfolded (`redact`), and the libpq parameters asyncpg
cannot read from a URL turned into connect arguments (`url_connect_args`).
"""

from __future__ import annotations

import re
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode

from sqlalchemy.engine import URL

from ...errors import LeaseValueError
from .._urls import hide_secrets
from .libpq import DSN_ONLY, DSN_PREFIX, check_query, connect_arguments

__all__ = [
    "SCHEMES",
    "TWO_ATS",
    "check_port",
    "host_port",
    "normalize_url",
    "redact",
    "split_hosts",
    "url_connect_args",
]

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


def split_hosts(scheme: str, rest: str) -> tuple[str, dict[str, str]]:
    """Check the host part of ``scheme://rest``; a libpq host list moves to the query.

    Returns the URL text to parse and the ``host``/``port`` query parameters to add (none for
    a single host). Messages never quote the URL: a misplaced piece of it may be a password.
    """
    if rest.count("@") > 1:
        # Strict on purpose: wherever the parser would cut, a piece of a password with an
        # unencoded '@' would end up shown as a host, a port, a database or a parameter.
        raise LeaseValueError(TWO_ATS)
    # Where SQLAlchemy's parser ends the user name and password (a password may hold '/').
    userinfo = _USERINFO.match(rest)
    start = userinfo.end() if userinfo else 0
    end = _HOST_END.search(rest, start)
    stop = end.start() if end else len(rest)
    pairs = [host_port(token) for token in rest[start:stop].split(",")] if stop > start else []
    if len(pairs) < 2:
        return f"{scheme}://{rest}", {}
    if not all(host for host, _ in pairs):
        raise LeaseValueError("the database URL's host list has an empty host")
    text = f"{scheme}://{rest[:start]}{rest[stop:]}"
    return text, {
        "host": ",".join(host for host, _ in pairs),
        "port": ",".join(str(port or _DEFAULT_PORT) for _, port in pairs),
    }


_DEFAULT_PORT = 5432
_USERINFO = re.compile(r"[^:/]*(?::[^@]*)?@")
_HOST_END = re.compile(r"[/?]")


def redact(url: URL) -> str:
    """The URL as text with its password masked (`hide_secrets`). Parameters carried in a
    ``dsn`` (see `normalize_url`) are shown as plain parameters again, and a host list as
    libpq writes it (``user@h1:5432,h2:5433/db``)."""
    dsn = url.query.get("dsn")
    if isinstance(dsn, str) and dsn.startswith(DSN_PREFIX):
        inner = dict(parse_qsl(dsn.partition("?")[2], keep_blank_values=True))
        url = url.difference_update_query(["dsn"]).update_query_dict(inner)
    url = hide_secrets(url)
    hosts, ports = url.query.get("host"), url.query.get("port")
    if url.host is None and isinstance(hosts, str) and isinstance(ports, str) and "," in hosts:
        pairs = zip(hosts.split(","), ports.split(","), strict=False)
        listed = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in pairs)
        text = url.difference_update_query(["host", "port"]).render_as_string(hide_password=True)
        end = _HOST_END.search(text, text.index("://") + 3)
        stop = end.start() if end else len(text)
        return text[:stop] + listed + text[stop:]
    return url.render_as_string(hide_password=True)


def url_connect_args(url: URL) -> tuple[URL, dict[str, Any]]:
    """An asyncpg URL without the libpq parameters asyncpg cannot take from a URL, and those
    as its connect arguments (`libpq.connect_arguments`); any other URL as it is."""
    if url.drivername != "postgresql+asyncpg":
        return url, {}
    return connect_arguments(url)
