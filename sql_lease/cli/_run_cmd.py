"""``sql-lease run --exclusive NAME --at-most 10m -- command args``: cron jobs on one replica.

Holds the lease NAME (renewed while the command runs, through the sync provider) and runs the
command; every other replica that fires the same job meanwhile skips it. Exit codes: the
command's own (128 + N when a signal N ended it); `SKIPPED` (75, or ``--skip-code``) when
another replica holds NAME; `LOST` (76) when the lease was lost while the command ran (the
command is then sent SIGTERM, and SIGKILL 10 s later); 127 when the command cannot be started;
`MISSING_DEPENDENCY` (78, EX_CONFIG) when the sync driver is not installed (the ``cli`` extra
brings it; a bare install of the library may lack it).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from datetime import timedelta
from types import FrameType

import click

from .. import migrate
from .._exclusive import exclusive
from ..errors import LeaseLost
from ..sync import HeldLease, SqlLeaseProvider
from ._errors import CliError, ExitCode
from ._options import Settings, database_options, to_age, to_name, to_ttl
from ._output import note

__all__ = ["LOST", "MISSING_DEPENDENCY", "NOT_STARTED", "SKIPPED", "run_cmd"]

SKIPPED = 75  #: EX_TEMPFAIL: another replica holds the lease (the default of --skip-code)
LOST = 76  #: the lease was lost while the command ran
NOT_STARTED = 127  #: the command was not found or could not be started
MISSING_DEPENDENCY = 78  #: EX_CONFIG: psycopg (the sync driver `run` needs) is not installed
_POLL_S = 0.1
_KILL_AFTER_S = 10.0


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _stop(proc: subprocess.Popen[bytes]) -> int:
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        return proc.wait(_KILL_AFTER_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        return proc.wait()


@click.command(
    "run",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "--exclusive",
    "name",
    required=True,
    callback=to_name,
    metavar="NAME",
    help="The lease that makes the job exclusive (escapes read).",
)
@click.option(
    "--at-most",
    required=True,
    callback=to_ttl,
    metavar="DURATION",
    help="Lease TTL: how long a crashed holder blocks the job (renewed while it runs).",
)
@click.option(
    "--at-least",
    default="0s",
    show_default=True,
    callback=to_age,
    metavar="DURATION",
    help="Keep the lease this long after it was taken, even if the command ends sooner.",
)
@click.option(
    "--skip-code",
    default=SKIPPED,
    show_default=True,
    type=click.IntRange(0, 255),
    help="Exit code when another replica holds the lease (0 keeps cron quiet).",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@database_options
def run_cmd(
    settings: Settings,
    name: str,
    at_most: int,
    at_least: int,
    skip_code: int,
    command: tuple[str, ...],
) -> int:
    """Run COMMAND while holding the lease NAME; skip it when another replica holds NAME.

    \b
    sql-lease run --exclusive reports:nightly --at-most 10m --at-least 30s -- ./nightly.sh

    Exits with the command's code, --skip-code (75) when skipped, 76 when the lease was lost
    while the command ran (the command gets SIGTERM), 127 when it cannot be started, 78 when
    psycopg (the sync driver, in the cli and sync extras) is not installed.
    """
    if at_least > at_most:
        raise CliError("--at-least must not be longer than --at-most", ExitCode.USAGE)
    if settings.pooler is not None:
        # The sync provider sets its server-side timeouts at connect time, which a pooler refuses.
        raise CliError(
            "sql-lease run does not support --pooler: give it a direct URL", ExitCode.USAGE
        )
    if settings.target.note:
        note(settings.target.note)
    if settings.target.embedded:
        migrate.upgrade(settings.target.url, table_name=settings.table, schema=settings.schema)
    seconds = settings.timeout_ms / 1000
    try:
        provider = SqlLeaseProvider.from_url(
            settings.target.url,
            table_name=settings.table,
            schema=settings.schema,
            timeout=seconds,
            connect_timeout=seconds,
            pool_size=2,
        )
    except ImportError as exc:
        note(f"error: {exc}")
        return MISSING_DEPENDENCY
    with provider:
        job = exclusive(
            provider,
            name,
            at_most_for=timedelta(milliseconds=at_most),
            at_least_for=timedelta(milliseconds=at_least),
        )
        try:
            with job:
                if not job:
                    note(f"skipped: {name!r} is held by {job.holder!r}")
                    return skip_code
                try:
                    proc = subprocess.Popen(list(command))
                except OSError as exc:
                    note(f"cannot start {command[0]!r}: {exc.strerror or exc}")
                    return NOT_STARTED
                return _supervise(proc, job.lease)
        except LeaseLost:
            return LOST


def _supervise(proc: subprocess.Popen[bytes], lease: HeldLease) -> int:
    """Wait for ``proc``, passing on SIGTERM/SIGINT; stop it if the lease is lost."""

    def forward(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while True:
            try:
                return _exit_code(proc.wait(_POLL_S))
            except subprocess.TimeoutExpired:
                pass
            if lease.lost.is_set():
                note(f"the lease was lost while the command ran ({lease.lost_reason}): stopping it")
                _stop(proc)
                return LOST
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
