"""libpq's URL query parameters, as far as asyncpg can honour them.

`check_query` validates a PostgreSQL URL's query when the URL is parsed: a parameter this
module does not know, or a value asyncpg would refuse at the first connection, raises
`LeaseValueError` naming it. `connect_arguments` turns the parameters asyncpg cannot read from
a URL (``application_name``, ``options``, ``connect_timeout``, the keepalives) into its
``connect()`` keyword arguments, for `sql_lease.backends._urls.build_engine`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl

from sqlalchemy.engine import URL

from ...errors import LeaseValueError

__all__ = ["DSN_ONLY", "DSN_PREFIX", "SUPPORTED", "check_query", "connect_arguments"]

DSN_PREFIX = "postgresql://?"  # how `normalize_url` hands asyncpg its DSN-only parameters

#: Handed to asyncpg's ``connect()`` as they are (SQLAlchemy's dialect passes the query on).
_AS_IS = ("host", "port", "user", "password", "database", "passfile", "krbsrvname", "gsslib")
#: SQLAlchemy's own asyncpg options, and the names `normalize_url` writes.
_DIALECT = ("prepared_statement_cache_size", "ssl", "dsn")
#: libpq parameters asyncpg reads from a DSN only (`normalize_url` packs them into ``dsn``).
DSN_ONLY = (
    "sslcert",
    "sslkey",
    "sslrootcert",
    "sslcrl",
    "sslpassword",
    "sslnegotiation",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
)
#: Mapped by `connect_arguments` to server settings or the connect timeout.
_MAPPED = (
    "application_name",
    "fallback_application_name",
    "options",
    "connect_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
)
#: Every query parameter a PostgreSQL URL may carry.
SUPPORTED = frozenset(
    (*_AS_IS, *_DIALECT, *DSN_ONLY, *_MAPPED, "sslmode", "dbname", "target_session_attrs")
)

_SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
_SESSION_ATTRS = ("any", "read-write", "read-only", "primary", "standby", "prefer-standby")
#: libpq keepalive parameters and the server settings that do their work (see the README).
_KEEPALIVE_SETTINGS = {
    "keepalives_idle": "tcp_keepalives_idle",
    "keepalives_interval": "tcp_keepalives_interval",
    "keepalives_count": "tcp_keepalives_count",
    "tcp_user_timeout": "tcp_user_timeout",
}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SETTING = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_PLAIN_VALUE = re.compile(r"[\w.+-]{1,40}")
_AT_HINT = "percent-encode an '@' in the password as %40 ('?' as %3F, '&' as %26)"


def check_query(query: Mapping[str, str | tuple[str, ...]]) -> dict[str, str | tuple[str, ...]]:
    """The query of a PostgreSQL URL, validated; ``dbname`` is renamed ``database``.

    Raises `LeaseValueError` naming the first parameter that is unknown, repeated (only
    ``host`` and ``port`` may repeat) or has a value asyncpg would refuse.
    """
    out = dict(query)
    for name, value in query.items():
        if name not in SUPPORTED:
            raise LeaseValueError(_unknown(name))
        if isinstance(value, tuple) and name not in ("host", "port"):
            raise LeaseValueError(f"the database URL gives {name} more than once")
    if "dbname" in out:
        if "database" in out:
            raise LeaseValueError("the database URL gives both dbname and database")
        out["database"] = out.pop("dbname")
    for name in ("sslmode", "ssl"):
        _one_of(out, name, _SSL_MODES)
    _one_of(out, "target_session_attrs", _SESSION_ATTRS)
    _one_of(out, "keepalives", ("0", "1"))
    _check_dsn(out.get("dsn"))
    _arguments(out)  # every mapped value is checked here, when the URL is parsed
    return out


def connect_arguments(url: URL) -> tuple[URL, dict[str, Any]]:
    """``url`` without the parameters asyncpg cannot take from it, and those parameters as
    asyncpg ``connect()`` arguments: ``server_settings`` (a dict) and ``timeout`` (seconds)."""
    present = [name for name in _MAPPED if name in url.query]
    if not present:
        return url, {}
    return url.difference_update_query(present), _arguments(url.query)


def _arguments(query: Mapping[str, str | tuple[str, ...]]) -> dict[str, Any]:
    """The ``connect()`` arguments for the mapped parameters of ``query`` (see the module)."""
    text = {name: value for name in _MAPPED if isinstance(value := query.get(name), str)}
    settings: dict[str, str] = {}
    if "options" in text:
        settings.update(_parse_options(text["options"]))
    keepalives = {
        setting: str(_whole(name, text[name]))
        for name, setting in _KEEPALIVE_SETTINGS.items()
        if name in text
    }
    if text.get("keepalives") != "0":  # keepalives=0: leave the server's own defaults
        settings.update(keepalives)
    name = text.get("application_name", text.get("fallback_application_name"))
    if name is not None:
        settings["application_name"] = name
    out: dict[str, Any] = {"server_settings": settings} if settings else {}
    if "connect_timeout" in text:
        out["timeout"] = _seconds("connect_timeout", text["connect_timeout"])
    return out


def _parse_options(text: str) -> dict[str, str]:
    """libpq's ``options``: ``-c name=value`` or ``--name=value`` settings, split on spaces
    (a backslash escapes a space or a backslash)."""
    words = _split_words(text)
    settings: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-c" and i + 1 < len(words):
            item, i = words[i + 1], i + 2
        elif (word.startswith("-c") and len(word) > 2) or (word.startswith("--") and "=" in word):
            item, i = word[2:], i + 1  # -cname=value or --name=value
        else:
            raise LeaseValueError(
                "the database URL's options may only set server settings, as "
                f"'-c name=value' or '--name=value' (not {_shown(word)})"
            )
        name, eq, value = item.partition("=")
        if not eq or not _SETTING.fullmatch(name):
            raise LeaseValueError(
                f"the database URL's options: {_shown(item)} is not name=value (write "
                "options=-c statement_timeout=5000, with %20 or + for the space)"
            )
        settings[name.replace("-", "_")] = value
    return settings


def _check_dsn(dsn: str | tuple[str, ...] | None) -> None:
    """Only the ``dsn`` `normalize_url` writes (DSN-only TLS parameters) is accepted."""
    if dsn is None:
        return
    inner = parse_qsl(dsn.partition("?")[2]) if isinstance(dsn, str) else [("", "")]
    if not (isinstance(dsn, str) and dsn.startswith(DSN_PREFIX)) or any(
        name not in DSN_ONLY for name, _ in inner
    ):
        raise LeaseValueError(
            "the database URL parameter dsn is not supported: write libpq's parameters in the "
            "URL itself (postgresql://user@host/db?sslmode=require)"
        )


def _split_words(text: str) -> list[str]:
    words: list[str] = []
    current: list[str] = []
    chars = iter(text)
    for char in chars:
        if char == "\\":
            current.append(next(chars, "\\"))
        elif char.isspace():
            if current:
                words.append("".join(current))
                current = []
        else:
            current.append(char)
    if current:
        words.append("".join(current))
    return words


def _one_of(
    query: Mapping[str, str | tuple[str, ...]], name: str, allowed: tuple[str, ...]
) -> None:
    value = query.get(name)
    if value is not None and value not in allowed:
        raise LeaseValueError(
            f"the database URL's {name} must be one of {', '.join(allowed)}, "
            f"not {_shown(str(value))}"
        )


def _whole(name: str, text: str) -> int:
    if not text.strip().isdigit():
        raise LeaseValueError(
            f"the database URL's {name} must be a whole number, not {_shown(text)}"
        )
    return int(text)


def _seconds(name: str, text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds <= 86_400:
        raise LeaseValueError(
            f"the database URL's {name} must be a number of seconds above 0 and at most 86400, "
            f"not {_shown(text)} (libpq's 0, wait forever, is not supported: every call has "
            "a deadline)"
        )
    return seconds


def _shown(value: str) -> str:
    """A value quoted in a message only when it cannot be a misplaced piece of a password."""
    return repr(value) if _PLAIN_VALUE.fullmatch(value) else "that value"


def _unknown(name: str) -> str:
    if not _NAME.fullmatch(name):
        # Not a parameter name: most likely the tail of a password cut at an unencoded '@'.
        return f"the database URL has a query parameter that is not a name: {_AT_HINT}"
    return (
        f"the database URL parameter {name} is not supported (supported: "
        f"{', '.join(sorted(SUPPORTED - {'dsn'}))})"
    )
