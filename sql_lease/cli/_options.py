"""Options shared by the commands, and the click types for durations and lease names."""

from __future__ import annotations

import functools
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from .._core.validate import MAX_TTL_MS, check_name
from ..errors import LeaseError
from ..migrate import ENV_SCHEMA, ENV_TABLE, ENV_URL
from ..schema import DEFAULT_TABLE
from ._db import Target, resolve
from ._errors import CliError, ExitCode, describe
from ._values import parse_duration_ms, unescape

__all__ = [
    "ENV_POOLER",
    "ENV_QUIET",
    "Settings",
    "database_options",
    "json_option",
    "migrate_command",
    "to_age",
    "to_duration",
    "to_name",
    "to_prefix",
    "to_timeout",
    "to_ttl",
]

F = TypeVar("F", bound=Callable[..., Any])

ENV_QUIET = "SQL_LEASE_QUIET"
ENV_POOLER = "SQL_LEASE_POOLER"

#: The longest --timeout: what `SqlLeaseProvider` accepts (one day).
MAX_TIMEOUT_MS = 86_400_000


def to_duration(ctx: click.Context, param: click.Parameter, value: str) -> int:
    """Click callback: ``500ms``, ``15s``, ``2m``... as whole milliseconds."""
    return _duration(ctx, param, value)


def to_ttl(ctx: click.Context, param: click.Parameter, value: str) -> int:
    """Click callback: a lease TTL (a duration from 1ms to 365 days)."""
    return _duration(ctx, param, value, maximum=MAX_TTL_MS)


def to_timeout(ctx: click.Context, param: click.Parameter, value: str) -> int:
    """Click callback: a bound on each database call (a duration from 1ms to one day)."""
    return _duration(ctx, param, value, maximum=MAX_TIMEOUT_MS)


def _duration(
    ctx: click.Context, param: click.Parameter, value: str, *, maximum: int | None = None
) -> int:
    try:
        return parse_duration_ms(value, maximum=maximum)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def to_age(ctx: click.Context, param: click.Parameter, value: str) -> int:
    """Click callback: like `to_duration`, but ``0s`` is allowed."""
    try:
        return parse_duration_ms(value, minimum=0)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def to_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    r"""Click callback: a key or owner with Python-style escapes decoded (``a\0b``, ``\x00``)."""
    if value is None:
        return None
    try:
        text = unescape(value)
        check_name("value", text)
    except (ValueError, LeaseError) as exc:
        raise click.BadParameter(str(exc).removeprefix("value "), ctx, param) from None
    return text


def to_prefix(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Click callback: like `to_name`, but an empty prefix means every key (None)."""
    return to_name(ctx, param, value) if value else None


@dataclass(frozen=True, slots=True)
class Settings:
    """Where the leases are and how to talk about them."""

    target: Target
    table: str
    schema: str | None
    timeout_ms: int
    as_json: bool
    quiet: bool = False  #: do not say which database is used
    pooler: str | None = None  #: "transaction" or "session": the URL reaches a pooler


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")(fn)


def database_options(fn: F) -> F:
    """Add --url, --table, --schema, --pooler, --timeout, --quiet and --json; pass them on
    as ``settings``. Expected failures become a `CliError` (see `describe`)."""

    @click.option(
        "--url",
        metavar="URL",
        help=f"Database URL (default: ${ENV_URL}, else an embedded SQLite file).",
    )
    @click.option(
        "--table",
        default=DEFAULT_TABLE,
        envvar=ENV_TABLE,
        show_default=True,
        help=f"Leases table (env {ENV_TABLE}).",
    )
    @click.option("--schema", default=None, envvar=ENV_SCHEMA, help=f"Schema (env {ENV_SCHEMA}).")
    @click.option(
        "--pooler",
        type=click.Choice(["transaction", "session"]),
        default=None,
        envvar=ENV_POOLER,
        help=f"The URL reaches PostgreSQL through a connection pooler such as PgBouncer, in "
        f"this pooling mode (env {ENV_POOLER}).",
    )
    @click.option(
        "--timeout",
        default="5s",
        callback=to_timeout,
        metavar="DURATION",
        show_default=True,
        help="Bound on each database call, connecting included (at most 1d).",
    )
    @click.option(
        "-q",
        "--quiet",
        is_flag=True,
        envvar=ENV_QUIET,
        help=f"Do not name the embedded database on stderr (env {ENV_QUIET}=1).",
    )
    @json_option
    @functools.wraps(fn)
    def wrapper(
        *args: Any,
        url: str | None,
        table: str,
        schema: str | None,
        pooler: str | None,
        timeout: int,
        quiet: bool,
        as_json: bool,
        **kwargs: Any,
    ) -> Any:
        target = resolve(url)
        if pooler is not None and target.embedded:
            raise CliError(
                f"--pooler needs a PostgreSQL --url (or {ENV_URL}): the embedded SQLite "
                "database has no pooler",
                ExitCode.USAGE,
            )
        settings = Settings(target, table, schema or None, timeout, as_json, quiet, pooler)
        try:
            return fn(*args, settings=settings, **kwargs)
        except CliError:
            raise
        except Exception as exc:
            described = describe(
                exc,
                where=settings.target.shown,
                secrets=settings.target.secrets,
                table=f"{settings.schema}.{settings.table}" if settings.schema else settings.table,
                migrate_hint=migrate_command(settings),
            )
            if described is None:
                raise
            raise CliError(described[1], described[0]) from exc

    return wrapper  # type: ignore[return-value]


def migrate_command(settings: Settings) -> str:
    """The ``sql-lease migrate`` command line that installs the schema these settings use,
    ready to paste: the ``--url`` given (a placeholder where its password was; a URL from the
    environment is left to the environment), ``--table``, ``--schema`` and ``--pooler``."""
    words = ["sql-lease", "migrate"]
    if settings.target.from_option:
        words += ["--url", settings.target.shown]
    if settings.pooler is not None:
        words += ["--pooler", settings.pooler]
    if settings.table != DEFAULT_TABLE:
        words += ["--table", settings.table]
    if settings.schema:
        words += ["--schema", settings.schema]
    return shlex.join(words)
