"""Exit codes, and the one place where failures become a single line on stderr."""

from __future__ import annotations

import enum
import json
import re

from ..errors import (
    LeaseConnectionError,
    LeaseDatabaseError,
    LeaseError,
    LeaseSchemaError,
    LeaseTimeoutError,
    LeaseTypeError,
    LeaseValueError,
)

__all__ = ["CliError", "ExitCode", "describe", "json_error", "one_line"]


class ExitCode(enum.IntEnum):
    """The documented exit codes of ``sql-lease``."""

    OK = 0
    NOT_HELD = 1  #: not acquired, not the owner, no live lease on the key, nothing released
    USAGE = 2  #: bad arguments or options (durations, escapes, URLs, revisions)
    UNREACHABLE = 3  #: the database could not be reached or did not answer in time
    SCHEMA = 4  #: the leases table is missing or behind: run `sql-lease migrate`
    DATABASE = 5  #: any other database failure, or a feature this version lacks
    INTERRUPTED = 130  #: Ctrl-C


class CliError(Exception):
    """An expected failure: ``message`` is shown as one line and the process exits ``code``."""

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.code = code


def describe(
    exc: BaseException,
    *,
    where: str = "the database",
    secrets: tuple[str, ...] = (),
    table: str = "leases",
    migrate_hint: str = "sql-lease migrate",
) -> tuple[ExitCode, str] | None:
    """Exit code and one-line message for an expected failure, or None for a bug.

    ``where`` names the database (password masked); ``secrets`` (passwords) are masked even if
    some message below us carried one. A missing schema names ``table`` and suggests the
    ``migrate_hint`` command line that installs it.
    """
    code = _code(exc)
    if code is None:
        return None
    message = str(exc) or type(exc).__name__
    if isinstance(exc, LeaseSchemaError):
        message = (
            f"the leases table {table} is missing or out of date in {where}: run `{migrate_hint}`"
        )
    return code, one_line(message, secrets)


def json_error(message: str, code: int) -> str:
    """The JSON document ``--json`` prints on stdout for a failure: ``{"error", "exit"}``."""
    return json.dumps({"error": message, "exit": int(code)}, indent=2)


def one_line(message: str, secrets: tuple[str, ...] = ()) -> str:
    """``message`` on one line, with every secret masked."""
    for secret in secrets:
        if secret:
            message = message.replace(secret, "***")
    return re.sub(r"\s*\n\s*", " ", message).strip()


def _code(exc: BaseException) -> ExitCode | None:
    if isinstance(exc, CliError):
        return exc.code
    if isinstance(exc, LeaseConnectionError | LeaseTimeoutError):
        return ExitCode.UNREACHABLE
    if isinstance(exc, LeaseSchemaError):
        return ExitCode.SCHEMA
    if isinstance(exc, LeaseTypeError | LeaseValueError):
        return ExitCode.USAGE
    if isinstance(exc, LeaseDatabaseError | LeaseError):
        return ExitCode.DATABASE
    if type(exc).__module__.startswith("alembic"):  # e.g. an unknown revision
        return ExitCode.USAGE
    return None
