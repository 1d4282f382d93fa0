"""Database URLs as users keep them: normalised to the async driver, never shown with a password.

The seam's URL handling, for every backend: which backend a URL is for comes from the registry
(`backend_for_scheme`), and what only one database knows stays in its package, asked through
its hooks (`Dialect.split_hosts`: a host list in the authority, as libpq's; `Dialect.redact`:
how its URLs are shown; `AsyncExecution.url_connect_args`: parameters its driver cannot read
from a URL). This module imports no backend package.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from ..errors import LeaseValueError
from . import BACKEND_PACKAGES, backend_for_scheme, backend_named

__all__ = ["build_engine", "hide_secrets", "normalize_url", "parse_url", "redact"]


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
    """`make_url`, after the backend of the URL's scheme checked its authority (and moved a
    host list to the query: `Dialect.split_hosts`)."""
    hosts: dict[str, str] = {}
    if isinstance(text, str):  # anything else is left to the parser's refusal
        scheme, sep, rest = text.partition("://")
        backend = backend_for_scheme(scheme.lower()) if sep else None
        if backend is not None and scheme.lower() in backend.url_schemes:
            text, hosts = backend.split_hosts(scheme, rest)
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


_SECRET_PARAMS = frozenset({"password", "sslpassword", "passfile"})


def hide_secrets(url: URL) -> URL:
    """``url`` with every secret query parameter (a password given as one) masked; render it
    with ``hide_password=True`` for the password of its authority."""
    secrets = [name for name in url.query if name.lower() in _SECRET_PARAMS]
    if secrets:
        url = url.update_query_dict(dict.fromkeys(secrets, "***"))
    return url


def redact(url: URL) -> str:
    """The URL as text with its password masked, also when given as a query parameter, as
    its backend shows it (`Dialect.redact`)."""
    backend = backend_for_scheme(url.drivername)
    if backend is not None:
        return backend.redact(url)
    return hide_secrets(url).render_as_string(hide_password=True)


def build_engine(url: URL, **kwargs: Any) -> AsyncEngine:
    """`create_async_engine` for a `normalize_url` URL, with bad options reported as
    `LeaseValueError`.

    The parameters its driver cannot take from a URL become ``connect_args``
    (`AsyncExecution.url_connect_args`): they win over the ones given (on PostgreSQL,
    ``application_name`` and ``options`` settings over the ``server_settings`` given,
    ``connect_timeout`` over ``timeout``).
    """
    backend = backend_for_scheme(url.drivername)
    if backend is not None:
        url, mapped = backend.url_connect_args(url)
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
