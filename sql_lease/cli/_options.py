"""Options shared by the commands, and the click types for durations and lease names."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from .._validate import check_name, check_ttl
from ..errors import LeaseError
from ..migrate import ENV_SCHEMA, ENV_TABLE, ENV_URL
from ..schema import DEFAULT_TABLE
from ._db import Target, resolve
from ._errors import CliError, describe
from ._values import parse_duration_ms, unescape

__all__ = [
    "Settings",
    "database_options",
    "json_option",
    "to_age",
    "to_duration",
    "to_name",
    "to_ttl",
]

F = TypeVar("F", bound=Callable[..., Any])


def to_duration(ctx: click.Context, param: click.Parameter, value: str) -> int:
    """Click callback: ``500ms``, ``15s``, ``2m``... as whole milliseconds."""
    try:
        return parse_duration_ms(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def to_ttl(ctx: click.Context, param: click.Parameter, value: str) -> int:
    """Click callback: a lease TTL (a duration from 1ms to 365 days)."""
    millis = to_duration(ctx, param, value)
    try:
        return check_ttl(millis)
    except LeaseError as exc:
        raise click.BadParameter(str(exc).replace("ttl_ms", "the TTL"), ctx, param) from None


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


@dataclass(frozen=True, slots=True)
class Settings:
    """Where the leases are and how to talk about them."""

    target: Target
    table: str
    schema: str | None
    timeout_ms: int
    as_json: bool


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")(fn)


def database_options(fn: F) -> F:
    """Add --url, --table, --schema, --timeout and --json; pass them on as ``settings``."""

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
        "--timeout",
        default="5s",
        callback=to_duration,
        metavar="DURATION",
        show_default=True,
        help="Bound on each database call, connecting included.",
    )
    @json_option
    @functools.wraps(fn)
    def wrapper(
        *args: Any,
        url: str | None,
        table: str,
        schema: str | None,
        timeout: int,
        as_json: bool,
        **kwargs: Any,
    ) -> Any:
        settings = Settings(resolve(url), table, schema or None, timeout, as_json)
        try:
            return fn(*args, settings=settings, **kwargs)
        except CliError:
            raise
        except Exception as exc:
            described = describe(exc, where=settings.target.shown, secrets=settings.target.secrets)
            if described is None:
                raise
            raise CliError(described[1], described[0]) from exc

    return wrapper  # type: ignore[return-value]
