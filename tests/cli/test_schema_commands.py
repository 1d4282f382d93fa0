"""migrate, current, check and downgrade as a deploy pipeline runs them."""

from __future__ import annotations

import json
from collections.abc import Callable

from sql_lease import migrate

from .conftest import Cli


def test_migrate_sql_prints_reviewable_sql_without_a_database(sql_lease: Cli) -> None:
    result = sql_lease("migrate", "--sql")
    assert result.code == 0, result.err
    assert "CREATE TABLE leases" in result.out and "leases_alembic_version" in result.out
    assert result.err == ""


def shown(url: str) -> str:
    """How the commands name a test database (no password: trust authentication)."""
    return "postgresql+asyncpg://" + url.split("://", 1)[1]


def test_check_exits_4_until_migrate_has_run(cli: Cli, empty_url: str) -> None:
    behind = cli("check", "--url", empty_url)
    assert behind.code == 4
    assert behind.err_lines == [
        f"sql-lease: error: the leases schema in {shown(empty_url)} is at nothing (not "
        f"installed), this version needs {migrate.head()}: run `sql-lease migrate --url "
        f"{shown(empty_url)}`"
    ]


def test_migrate_then_check_passes(sql_lease: Cli, make_database: Callable[[], str]) -> None:
    url = make_database()
    missing = sql_lease("get", "k", "--url", url)
    assert missing.code == 4 and f"run `sql-lease migrate --url {shown(url)}`" in missing.err

    current = sql_lease("current", "--url", url, "--json")
    assert json.loads(current.out) == {
        "current": None,
        "head": migrate.head(),
        "at_head": False,
        "database": shown(url),
    }

    done = sql_lease("migrate", "--url", url)
    assert (done.code, done.out.strip()) == (
        0,
        f"leases schema at {migrate.head()} (head) in {shown(url)}",
    )
    assert sql_lease("migrate", "--url", url).code == 0  # idempotent
    ready = sql_lease("check", "--url", url)
    assert (ready.code, ready.out.strip()) == (
        0,
        f"ok: leases schema at head ({migrate.head()}) in {shown(url)}",
    )


def test_downgrade_needs_confirmation_then_removes_the_schema(
    sql_lease: Cli, make_database: Callable[[], str]
) -> None:
    url = make_database()
    assert sql_lease("migrate", "--url", url).code == 0
    refused = sql_lease("downgrade", "--url", url)
    assert refused.code == 2 and "--yes" in refused.err
    assert sql_lease("check", "--url", url).code == 0

    done = sql_lease("downgrade", "--yes", "--url", url)
    assert (done.code, done.out.strip()) == (
        0,
        f"leases schema at base (not installed) in {shown(url)}",
    )
    behind = sql_lease("check", "--url", url, "--json")
    assert behind.code == 4 and json.loads(behind.out)["at_head"] is False


def test_downgrade_sql_prints_the_sql_without_a_database(sql_lease: Cli) -> None:
    result = sql_lease("downgrade", "--sql")
    assert result.code == 0 and "DROP TABLE leases" in result.out


def test_an_unknown_revision_is_a_usage_error(sql_lease: Cli, cli_url: str) -> None:
    result = sql_lease("migrate", "--to", "nope", "--url", cli_url)
    assert result.code == 2
    assert len(result.err_lines) == 1 and "nope" in result.err
