"""``sql-lease run`` with only the ``cli`` extra installed, as a new user installs it.

With only ``[cli]``, ``run`` used to print a traceback (``No module named 'psycopg'``) and exit
1, the code for "not acquired". The ``cli`` extra now brings the sync driver; a bare install
that still lacks it gets one line naming the extra and an exit code of its own (78).
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from collections.abc import Callable
from pathlib import Path

import pytest

from sql_lease import migrate
from sql_lease.cli._run_cmd import MISSING_DEPENDENCY

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SQL_LEASE_")}
    return {**base, **extra}


@pytest.fixture(scope="session")
def cli_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the project installed from the checkout with only ``[cli]``."""
    where = tmp_path_factory.mktemp("cli-only-venv")
    venv.create(where, with_pip=True)
    subprocess.run(
        [where / "bin" / "python", "-m", "pip", "install", "-q", f"{ROOT}[cli]"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return where


@pytest.mark.timeout(400)
def test_run_works_with_only_the_cli_extra(
    cli_only: Path, make_database: Callable[[], str], tmp_path: Path
) -> None:
    url = make_database()
    migrate.upgrade(url)
    done = subprocess.run(
        [
            cli_only / "bin" / "sql-lease",
            "run",
            "--exclusive",
            "job",
            "--at-most",
            "1m",
            "--url",
            url,
            "--",
            sys.executable,
            "-c",
            "print('ran')",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the checkout: the installed package runs
        env=_env(),
        timeout=120,
    )
    assert (done.returncode, done.stdout) == (0, "ran\n"), done.stderr


_BLOCKED = (
    "import sys; sys.modules['psycopg'] = None; sys.modules['psycopg_pool'] = None\n"
    "from sql_lease.cli import main; main()"
)


def test_run_without_the_driver_names_the_extra_and_exits_78(
    make_database: Callable[[], str], tmp_path: Path
) -> None:
    url = make_database()
    migrate.upgrade(url)
    marker = tmp_path / "ran"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _BLOCKED,
            "run",
            "--exclusive",
            "job",
            "--at-most",
            "1m",
            "--url",
            url,
            "--",
            "touch",
            str(marker),
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert done.returncode == MISSING_DEPENDENCY == 78
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("sql-lease: error: sql_lease.sync on PostgreSQL needs a package")
    assert "install the `sync` extra of sql-lease (psycopg, psycopg-pool)" in done.stderr
    assert not marker.exists()
