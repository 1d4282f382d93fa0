"""Running the command line against fresh PostgreSQL databases.

``cli`` runs ``python -m sql_lease`` as a subprocess (exit codes, stderr, process boundary);
``sql_lease`` runs the same entry point in this process, for the many fast variations.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from sql_lease import migrate
from sql_lease.cli._app import run as cli_run


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return self.err.splitlines()


Cli = Callable[..., Result]


def run_cli(
    *args: str, env: dict[str, str] | None = None, state: str, timeout: float = 60
) -> Result:
    """``python -m sql_lease ARGS`` with a clean environment (no database URL inherited)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SQL_LEASE_")}
    base |= {"COLUMNS": "200", "XDG_STATE_HOME": state}
    done = subprocess.run(
        [sys.executable, "-m", "sql_lease", *args],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=timeout,
        check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """The command line as a subprocess (its embedded database under ``tmp_path``)."""
    return functools.partial(run_cli, state=str(tmp_path))


@pytest.fixture
def sql_lease(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Cli:
    """The command line in-process: same runner, same output, without a Python start-up."""
    for name in list(os.environ):
        if name.startswith("SQL_LEASE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))

    def run(*args: str, env: dict[str, str] | None = None) -> Result:
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        capsys.readouterr()
        code = cli_run(list(args))
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


@pytest.fixture(scope="module")
def empty_url(make_database: Callable[[], str]) -> str:
    """A fresh database without the leases schema."""
    return make_database()


@pytest.fixture(scope="module")
def cli_url(make_database: Callable[[], str]) -> str:
    """A fresh database of this module's own, migrated."""
    url = make_database()
    migrate.upgrade(url)
    return url
