"""The ``sql-lease`` command group and its runner (exit codes, one-line errors)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from .. import __version__
from . import _demo, _lease_cmds, _schema_cmds, _sql_cmd, _top
from ._errors import CliError, ExitCode, json_error, one_line

__all__ = ["cli", "run"]

_HELP = """Distributed leases on PostgreSQL: inspect and manage them, migrate, run the demo.

The database is --url (postgresql://... or sqlite:///path.db), else $SQL_LEASE_DATABASE_URL,
else an embedded SQLite file in $XDG_STATE_HOME/sql-lease (its path is printed on stderr
unless --quiet or --json), which is migrated automatically. An empty --url or
$SQL_LEASE_DATABASE_URL is a usage error, never a fallback to that file.

\b
KEY and OWNER arguments read Python-style escapes: \\0 (always NUL, never octal),
\\xHH, \\uHHHH, \\n, \\t, and \\\\ for a backslash. Output shows them the same way,
so a key can be pasted back; --json gives the exact strings.

\b
Exit codes:
  0  done
  1  not acquired, not the owner, no live lease on KEY, nothing released
     (an empty `list` is exit 0)
  2  usage error (bad option, duration, escape, URL or revision)
  3  database unreachable or not answering in time
  4  leases schema missing or behind: run `sql-lease migrate`
  5  other database failure
"""


@click.group(help=_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sql-lease")
def cli() -> None:
    pass


for command in [
    *_schema_cmds.COMMANDS,
    *_lease_cmds.COMMANDS,
    _top.top_cmd,
    _demo.demo_cmd,
    _sql_cmd.sql_cmd,
]:
    cli.add_command(command)

from ._run_cmd import run_cmd  # noqa: E402 - registered here to keep the import block untouched

cli.add_command(run_cmd)


def _wants_json(args: Sequence[str]) -> bool:
    """``--json`` among the options (before a ``--``), even if parsing stopped earlier."""
    args = list(args)
    return "--json" in (args[: args.index("--")] if "--" in args else args)


def _fail(prefix: str, message: str, code: int, as_json: bool) -> int:
    """One line on stderr; with ``--json`` also ``{"error": ..., "exit": N}`` on stdout."""
    line = one_line(message)
    if as_json:
        click.echo(json_error(line, code))
    click.echo(f"{prefix}: error: {line}", err=True)
    return code


def run(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit code (never a traceback for expected errors).

    Without arguments it prints the help on stderr and exits 2, as a click 8.2+ group does
    (here with any click version).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        with click.Context(cli, info_name="sql-lease", **cli.context_settings) as ctx:
            click.echo(ctx.get_help(), err=True)
        return ExitCode.USAGE
    as_json = _wants_json(args)
    try:
        result = cli.main(args=args, prog_name="sql-lease", standalone_mode=False)
    except CliError as exc:
        return _fail("sql-lease", str(exc), exc.code, as_json)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "sql-lease"
        return _fail(where, f"{exc.format_message()} (see --help)", ExitCode.USAGE, as_json)
    except click.ClickException as exc:
        return _fail("sql-lease", exc.format_message(), exc.exit_code, as_json)
    except (click.Abort, KeyboardInterrupt):
        click.echo("sql-lease: interrupted", err=True)
        return ExitCode.INTERRUPTED
    return int(result) if isinstance(result, int) else ExitCode.OK
