"""The ``sql-lease`` command group and its runner (exit codes, one-line errors)."""

from __future__ import annotations

from collections.abc import Sequence

import click

from .. import __version__
from . import _demo, _lease_cmds, _schema_cmds
from ._errors import CliError, ExitCode, one_line

__all__ = ["cli", "run"]

_HELP = """Distributed leases on PostgreSQL: inspect and manage them, migrate, run the demo.

The database is --url (postgresql://... or sqlite:///path.db), else $SQL_LEASE_DATABASE_URL,
else an embedded SQLite file in $XDG_STATE_HOME/sql-lease (its path is printed), which is
migrated automatically.

\b
KEY and OWNER arguments read Python-style escapes: \\0 (always NUL, never octal),
\\xHH, \\uHHHH, \\n, \\t, and \\\\ for a backslash. Output shows them the same way,
so a key can be pasted back; --json gives the exact strings.

\b
Exit codes:
  0  done
  1  not acquired, not the owner, or nothing to show or release
  2  usage error (bad option, duration, escape, URL or revision)
  3  database unreachable or not answering in time
  4  leases schema missing or behind: run `sql-lease migrate`
  5  other database failure
"""


@click.group(help=_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sql-lease")
def cli() -> None:
    pass


for command in [*_schema_cmds.COMMANDS, *_lease_cmds.COMMANDS, _demo.demo_cmd]:
    cli.add_command(command)


def _fail(prefix: str, message: str, code: int) -> int:
    click.echo(f"{prefix}: error: {one_line(message)}", err=True)
    return code


def run(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit code (never a traceback for expected errors)."""
    try:
        result = cli.main(
            args=None if argv is None else list(argv), prog_name="sql-lease", standalone_mode=False
        )
    except CliError as exc:
        return _fail("sql-lease", str(exc), exc.code)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "sql-lease"
        return _fail(where, f"{exc.format_message()} (see --help)", ExitCode.USAGE)
    except click.ClickException as exc:
        return _fail("sql-lease", exc.format_message(), exc.exit_code)
    except (click.Abort, KeyboardInterrupt):
        click.echo("sql-lease: interrupted", err=True)
        return ExitCode.INTERRUPTED
    return int(result) if isinstance(result, int) else ExitCode.OK
