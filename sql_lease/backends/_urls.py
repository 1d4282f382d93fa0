"""Database URLs as users keep them: normalised to the async driver, never shown with a password."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from ..errors import LeaseValueError
from . import BACKEND_PACKAGES, backend_for_scheme, backend_named
from .postgres.libpq import DSN_PREFIX, connect_arguments
from .postgres.urls import SCHEMES as PG_SCHEMES
from .postgres.urls import TWO_ATS, host_port

__all__ = ["build_engine", "normalize_url", "parse_url", "redact"]


def normalize_url(url: str | URL) -> URL:
    """Parse ``url`` and let its database's backend check it and set its async driver:
    ``postgresql://``/``postgres://`` become ``postgresql+asyncpg://``, ``sqlite:///path``
    becomes ``sqlite+aiosqlite:///path`` (see each backend's ``normalize_url``).

    Percent-encoded passwords are decoded by the parser. libpq's multi-host form
    (``postgresql://u@h1:5432,h2:5433/db``) becomes SQLAlchemy's ``?host=h1,h2&port=5432,5433``
    (a host without a port gets 5432). Raises `LeaseValueError` for anything else, without
    quoting the URL.
    """
    parsed = url if isinstance(url, URL) else parse_url(url)
    backend = backend_for_scheme(parsed.drivername)
    if backend is None or parsed.drivername == backend.sync_driver:
        raise LeaseValueError(
            f"unsupported database URL scheme {parsed.drivername!r}: use {_schemes()}"
        )
    return backend.normalize_url(parsed)


def _schemes() -> str:
    examples = [backend_named(package).url_example for package in BACKEND_PACKAGES]
    return ", or ".join(examples)


def parse_url(text: str) -> URL:
    """`make_url`, after checking a PostgreSQL URL's authority and rewriting a host list."""
    hosts: dict[str, str] = {}
    if isinstance(text, str):  # anything else is left to the parser's refusal
        scheme, sep, rest = text.partition("://")
        if sep and scheme.lower() in PG_SCHEMES:
            text, hosts = _split_hosts(scheme, rest)
    try:
        parsed = make_url(text)
    except (ArgumentError, ValueError, TypeError) as exc:
        # The parser's message can quote the URL, password included: keep it out.
        raise LeaseValueError(
            f"not a valid database URL ({type(exc).__name__}); expected {_schemes()}"
        ) from None
    if hosts:
        if "host" in parsed.query or "port" in parsed.query:
            raise LeaseValueError(
                "the database URL lists hosts both before its path and in host= or port="
            )
        parsed = parsed.update_query_dict(hosts)
    return parsed


def _split_hosts(scheme: str, rest: str) -> tuple[str, dict[str, str]]:
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


_SECRET_PARAMS = frozenset({"password", "sslpassword", "passfile"})


def redact(url: URL) -> str:
    """The URL as text with its password masked, also when given as a query parameter.

    Parameters carried in a ``dsn`` (see `normalize_url`) are shown as plain parameters again,
    and a host list as libpq writes it (``user@h1:5432,h2:5433/db``).
    """
    dsn = url.query.get("dsn")
    if isinstance(dsn, str) and dsn.startswith(DSN_PREFIX):
        inner = dict(parse_qsl(dsn.partition("?")[2], keep_blank_values=True))
        url = url.difference_update_query(["dsn"]).update_query_dict(inner)
    secrets = [name for name in url.query if name.lower() in _SECRET_PARAMS]
    if secrets:
        url = url.update_query_dict(dict.fromkeys(secrets, "***"))
    hosts, ports = url.query.get("host"), url.query.get("port")
    if url.host is None and isinstance(hosts, str) and isinstance(ports, str) and "," in hosts:
        pairs = zip(hosts.split(","), ports.split(","), strict=False)
        listed = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in pairs)
        text = url.difference_update_query(["host", "port"]).render_as_string(hide_password=True)
        end = _HOST_END.search(text, text.index("://") + 3)
        stop = end.start() if end else len(text)
        return text[:stop] + listed + text[stop:]
    return url.render_as_string(hide_password=True)


def build_engine(url: URL, **kwargs: Any) -> AsyncEngine:
    """`create_async_engine` for a `normalize_url` URL, with bad options reported as
    `LeaseValueError`.

    The libpq parameters asyncpg cannot take from a URL become ``connect_args``: they win
    over the ones given (``application_name`` and ``options`` settings over the
    ``server_settings`` given, ``connect_timeout`` over ``timeout``).
    """
    if url.drivername == "postgresql+asyncpg":
        url, mapped = connect_arguments(url)
        if mapped:
            given = dict(kwargs.get("connect_args") or {})
            settings = {**given.get("server_settings", {}), **mapped.pop("server_settings", {})}
            kwargs["connect_args"] = (
                given | mapped | ({"server_settings": settings} if settings else {})
            )
    try:
        return create_async_engine(url, **kwargs)
    except (ArgumentError, ValueError, TypeError) as exc:
        raise LeaseValueError(
            f"cannot build an engine for {redact(url)}: {type(exc).__name__} in its options"
        ) from None
