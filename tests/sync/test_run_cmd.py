"""``sql-lease run --exclusive``: cron jobs on one replica (real database, real commands).

The exit code through a real ``python -m sql_lease`` process and the loss of the lease (a
signal to the command) run as subprocesses; the many fast variations run the same entry point
in this process (`sql_lease.cli._app.run`), without a Python start-up each.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sql_lease.cli._app import run as cli_run
from sql_lease.cli._run_cmd import LOST, NOT_STARTED, SKIPPED
from sql_lease.sync import SqlLeaseProvider

from ._events import eventually


def sql_lease(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sql_lease", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


InProcess = Callable[..., tuple[int, str]]


@pytest.fixture
def in_process(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> InProcess:
    """``sql-lease ARGS`` in this process: its exit code and its stderr."""
    for name in list(os.environ):
        if name.startswith("SQL_LEASE_"):
            monkeypatch.delenv(name)

    def run(*args: str) -> tuple[int, str]:
        capsys.readouterr()
        code = cli_run(list(args))
        return code, capsys.readouterr().err

    return run


def test_the_command_runs_under_the_lease_and_its_exit_code_is_returned(
    database_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "seen"
    script = f"import sys; open({str(out)!r}, 'w').write('ran'); sys.exit(3)"
    done = sql_lease(
        "run",
        "--url",
        database_url,
        "--exclusive",
        "cron\\0a",
        "--at-most",
        "1m",
        "--",
        sys.executable,
        "-c",
        script,
    )
    assert done.returncode == 3, done.stderr
    assert out.read_text() == "ran"
    with SqlLeaseProvider.from_url(database_url) as p:
        assert p.get_lease_owner("cron\0a") is None  # released afterwards


def test_a_held_job_is_skipped_with_the_skip_code(
    database_url: str, tmp_path: Path, in_process: InProcess
) -> None:
    with SqlLeaseProvider.from_url(database_url) as p:
        p.acquire_lease("cron-b", "replica-2", 60_000)
        marker = tmp_path / "must-not-exist"
        args = ["run", "--url", database_url, "--exclusive", "cron-b", "--at-most", "1m"]
        code, err = in_process(*args, "--", "touch", str(marker))
        assert code == SKIPPED, err
        assert "replica-2" in err and not marker.exists()
        code, err = in_process(*args, "--skip-code", "0", "--", "touch", str(marker))
        assert code == 0 and not marker.exists(), err
        p.release_lease("cron-b", "replica-2")


def test_at_least_keeps_the_lease_after_a_fast_command(
    database_url: str, in_process: InProcess
) -> None:
    args = ["--exclusive", "cron-c", "--at-most", "5m", "--at-least", "2m", "--", "true"]
    code, err = in_process("run", "--url", database_url, *args)
    assert code == 0, err
    with SqlLeaseProvider.from_url(database_url) as p:
        owner = p.get_lease_owner("cron-c")
        assert owner is not None and owner.endswith(":at-least")
        assert p.force_release("cron-c")


def test_a_missing_command_and_bad_durations(database_url: str, in_process: InProcess) -> None:
    base = ["run", "--url", database_url, "--exclusive", "cron-d", "--at-most", "1m"]
    code, err = in_process(*base, "--", "no-such-command-xyz")
    assert code == NOT_STARTED and "no-such-command-xyz" in err
    code, err = in_process(*base, "--at-least", "2m", "--", "true")
    assert code == 2 and "--at-least" in err
    code, err = in_process(*base[:-2], "--at-most", "10", "--", "true")  # a duration needs a unit
    assert code == 2 and "--at-most" in err, err
    with SqlLeaseProvider.from_url(database_url) as p:
        assert p.get_lease_owner("cron-d") is None  # released after the command failed to start


def test_losing_the_lease_stops_the_command(database_url: str, tmp_path: Path) -> None:
    started = tmp_path / "started"
    script = f"import time; open({str(started)!r}, 'w').write('x'); time.sleep(120)"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sql_lease",
            "run",
            "--url",
            database_url,
            "--exclusive",
            "cron-e",
            "--at-most",
            "1s",
            "--",
            sys.executable,
            "-c",
            script,
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        eventually(started.exists, "the command running", within=60)
        with SqlLeaseProvider.from_url(database_url) as p:
            assert p.force_release("cron-e")
        assert proc.wait(60) == LOST
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
