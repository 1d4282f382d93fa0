"""Without --url or SQL_LEASE_DATABASE_URL every command runs on an embedded SQLite file."""

from __future__ import annotations

import json
import re
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


def test_the_demos_progress_bar_ends_on_the_numbers_of_its_summary(
    sql_lease: Cli, state: dict[str, str]
) -> None:
    result = sql_lease(
        "demo", "--workers", "2", "--threads", "2", "--signals", "16", "--interval", "3ms",
        env={**state, "COLUMNS": "200"},
    )  # fmt: skip
    assert result.code == 0, result.err
    (bar,) = [line for line in result.err_lines if line.startswith("signals processed")]
    shown = re.search(r"16/16 runs (\d+) \(by transfer (\d+)\)", bar)
    assert shown is not None, bar
    runs = re.search(r"│ runs\s+│\s+(\d+) │", result.out)
    by_transfer = re.search(r"│ follow-up runs by transfer\s+│\s+(\d+) │", result.out)
    assert runs is not None and by_transfer is not None, result.out
    assert (shown[1], shown[2]) == (runs[1], by_transfer[1])


def test_downgrade_asks_for_yes_saying_what_it_removes(
    sql_lease: Cli, state: dict[str, str]
) -> None:
    assert sql_lease("migrate", env=state).code == 0
    one = sql_lease("downgrade", "--to", "0001", env=state)
    assert one.code == 2
    message = one.err_lines[-1]
    # The newest revision first (whichever it is), then every one down to 0002.
    assert message.startswith("sql-lease: error: downgrade to 0001 undoes 0"), message
    assert "0006 (Pooler mode's functions" in message, message
    assert "0005 (Pooler mode" in message, message
    assert "0004 (Fences carry" in message, message
    assert "0003 (Event tables" in message and "0002 (Add wanted_until" in message, message
    assert "--yes" in message and "drops" not in message
    base = sql_lease("downgrade", env=state)
    assert base.code == 2
    assert "drops the leases table with every lease in it" in base.err_lines[-1]
    assert sql_lease("check", env=state).code == 0  # nothing was removed
    done = sql_lease("downgrade", "--to", "0001", "--yes", env=state)
    assert done.code == 0, done.err
    assert "leases schema at 0001" in done.out


def test_check_labels_its_errors_check(
    sql_lease: Cli, state: dict[str, str], tmp_path: Path
) -> None:
    garbage = tmp_path / "not-a-database.db"
    garbage.write_bytes(b"this is not a SQLite file, just some text " * 100)
    result = sql_lease("check", "--url", f"sqlite:///{garbage}", env=state)
    assert result.code == 3, result.err  # the database cannot be used: not a generic failure
    assert result.err_lines[-1].startswith("sql-lease: error: check: "), result.err
    assert "file is not a database" in result.err
    missing = sql_lease("check", "--url", f"sqlite:///{tmp_path / 'missing.db'}", env=state)
    assert missing.code == 4 and "run `sql-lease migrate --url sqlite+aiosqlite:///" in missing.err
    assert not (tmp_path / "missing.db").exists()
