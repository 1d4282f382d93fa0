"""``sql-lease run --exclusive``: cron jobs on one replica, as subprocesses (real database)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

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


def test_a_held_job_is_skipped_with_the_skip_code(database_url: str, tmp_path: Path) -> None:
    with SqlLeaseProvider.from_url(database_url) as p:
        p.acquire_lease("cron-b", "replica-2", 60_000)
        marker = tmp_path / "must-not-exist"
        args = ["run", "--url", database_url, "--exclusive", "cron-b", "--at-most", "1m"]
        skipped = sql_lease(*args, "--", "touch", str(marker))
        assert skipped.returncode == SKIPPED, skipped.stderr
        assert "replica-2" in skipped.stderr and not marker.exists()
        quiet = sql_lease(*args, "--skip-code", "0", "--", "touch", str(marker))
        assert quiet.returncode == 0 and not marker.exists()
        p.release_lease("cron-b", "replica-2")


def test_at_least_keeps_the_lease_after_a_fast_command(database_url: str) -> None:
    done = sql_lease(
        "run",
        "--url",
        database_url,
        "--exclusive",
        "cron-c",
        "--at-most",
        "5m",
        "--at-least",
        "2m",
        "--",
        "true",
    )
    assert done.returncode == 0, done.stderr
    with SqlLeaseProvider.from_url(database_url) as p:
        owner = p.get_lease_owner("cron-c")
        assert owner is not None and owner.endswith(":at-least")
        assert p.force_release("cron-c")


def test_a_missing_command_and_bad_durations(database_url: str) -> None:
    missing = sql_lease(
        "run",
        "--url",
        database_url,
        "--exclusive",
        "cron-d",
        "--at-most",
        "1m",
        "--",
        "no-such-command-xyz",
    )
    assert missing.returncode == NOT_STARTED
    bad = sql_lease(
        "run",
        "--url",
        database_url,
        "--exclusive",
        "cron-d",
        "--at-most",
        "1m",
        "--at-least",
        "2m",
        "--",
        "true",
    )
    assert bad.returncode == 2 and "--at-least" in bad.stderr
    unit = sql_lease(
        "run", "--url", database_url, "--exclusive", "x", "--at-most", "10", "--", "true"
    )
    assert unit.returncode == 2


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
