"""Without --url or SQL_LEASE_DATABASE_URL every command runs on an embedded SQLite file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import Cli


@pytest.fixture
def state(tmp_path: Path) -> dict[str, str]:
    return {"XDG_STATE_HOME": str(tmp_path)}


def test_commands_use_a_migrated_sqlite_file_and_say_where(
    sql_lease: Cli, state: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "sql-lease" / "leases.db"
    won = sql_lease("acquire", r"res\0t", "run-1", env=state)
    assert won.code == 0, won.err
    assert won.err.strip() == (
        "sql-lease: no --url or SQL_LEASE_DATABASE_URL: "
        f"using the embedded SQLite database at {path}"
    )
    assert path.is_file()
    lost = sql_lease("acquire", r"res\0t", "run-2", env=state)
    assert lost.code == 1 and "held by run-1" in lost.out
    shown = sql_lease("get", r"res\x00t", "--json", env=state)
    assert json.loads(shown.out)["owner"] == "run-1"
    assert sql_lease("check", env=state).code == 0


def test_the_demo_runs_on_a_temporary_sqlite_file_by_default(
    sql_lease: Cli, state: dict[str, str], tmp_path: Path
) -> None:
    result = sql_lease(
        "demo", "--workers", "2", "--threads", "2", "--signals", "16", "--interval", "3ms",
        "--json", env=state,
    )  # fmt: skip
    assert result.code == 0, result.err
    assert "embedded SQLite database at" in result.err and "sql-lease-demo-" in result.err
    summary = json.loads(result.out)
    assert summary["verdict"]["ok"] and summary["processed"] == 16
    assert not (tmp_path / "sql-lease").exists()  # the demo's file is temporary
