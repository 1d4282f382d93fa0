"""Which database a command uses: an empty --url or variable is an error, never a fallback.

``sql-lease migrate --url "$DATABASE_URL"`` with the variable unset used to migrate the
embedded SQLite file and exit 0 (and ``check`` said ok: a readiness probe passing against a
local file). The embedded default applies only when no URL is given at all, and the commands
say which database they used.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sql_lease import migrate

from .conftest import Cli

COMMANDS = [
    ("migrate",),
    ("check",),
    ("current",),
    ("downgrade", "--yes"),
    ("acquire", "k", "o"),
    ("get", "k"),
    ("list",),
    ("release", "k", "o"),
    ("run", "--exclusive", "job", "--at-most", "1m", "--", "true"),
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_url_is_a_usage_error(
    sql_lease: Cli, tmp_path: Path, args: tuple[str, ...], empty: str
) -> None:
    result = sql_lease(args[0], "--url", empty, *args[1:])
    assert result.code == 2, result
    assert result.err_lines[-1] == (
        "sql-lease: error: --url is empty: give a database URL (without --url and "
        "SQL_LEASE_DATABASE_URL the embedded SQLite database is used)"
    )
    assert not (tmp_path / "sql-lease").exists() or not any((tmp_path / "sql-lease").iterdir())


@pytest.mark.parametrize("args", [("migrate",), ("check",), ("get", "k")], ids=lambda a: a[0])
def test_an_empty_variable_is_a_usage_error(sql_lease: Cli, args: tuple[str, ...]) -> None:
    result = sql_lease(*args, env={"SQL_LEASE_DATABASE_URL": ""})
    assert result.code == 2, result
    assert "SQL_LEASE_DATABASE_URL is empty" in result.err


def test_an_empty_url_is_refused_even_with_the_variable_set(sql_lease: Cli, cli_url: str) -> None:
    result = sql_lease("check", "--url", "", env={"SQL_LEASE_DATABASE_URL": cli_url})
    assert result.code == 2 and "--url is empty" in result.err


def test_the_schema_commands_name_the_database_they_used(sql_lease: Cli, cli_url: str) -> None:
    shown = "postgresql+asyncpg://" + cli_url.split("://", 1)[1]
    done = sql_lease("migrate", "--url", cli_url)
    assert done.out.strip() == f"leases schema at {migrate.head()} (head) in {shown}"
    ready = sql_lease("check", "--url", cli_url)
    assert ready.out.strip() == f"ok: leases schema at head ({migrate.head()}) in {shown}"
    assert json.loads(sql_lease("check", "--url", cli_url, "--json").out)["database"] == shown
    embedded = sql_lease("check", "--json")
    assert json.loads(embedded.out)["database"].startswith("sqlite+aiosqlite:///")


def test_a_url_from_the_environment_is_named_on_stderr(sql_lease: Cli, cli_url: str) -> None:
    result = sql_lease("get", "k", env={"SQL_LEASE_DATABASE_URL": cli_url})
    assert result.code == 1
    assert result.err.startswith("sql-lease: using SQL_LEASE_DATABASE_URL: postgresql+asyncpg://")


def test_the_migrate_hint_carries_the_url_and_table_used(sql_lease: Cli, empty_url: str) -> None:
    with_password = empty_url.replace("postgres@", "postgres:s3cret@", 1)
    behind = sql_lease("check", "--url", with_password, "--table", "jobs")
    assert behind.code == 4
    assert "s3cret" not in behind.err
    hint = behind.err.split("run `", 1)[1].split("`", 1)[0]
    assert hint.startswith("sql-lease migrate --url 'postgresql+asyncpg://postgres:***@")
    assert hint.endswith(" --table jobs")
    missing = sql_lease("get", "k", "--url", empty_url, "--table", "jobs")
    assert missing.code == 4
    shown = "postgresql+asyncpg://" + empty_url.split("://", 1)[1]
    assert f"run `sql-lease migrate --url {shown} --table jobs`" in missing.err
