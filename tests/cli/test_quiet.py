"""Which database is used: named on stderr for people, never with --quiet or --json."""

from __future__ import annotations

import json

from .conftest import Cli

NOTE = "using the embedded SQLite database at"


def test_the_embedded_database_is_named_unless_quiet_or_json(sql_lease: Cli) -> None:
    named = sql_lease("acquire", "k", "run-1")
    assert named.code == 0 and NOTE in named.err
    for args in (("get", "k", "--quiet"), ("get", "k", "-q"), ("list", "--json")):
        result = sql_lease(*args)
        assert result.code == 0 and result.err == "", (args, result.err)
    assert json.loads(sql_lease("get", "k", "--json").out)["owner"] == "run-1"
    assert sql_lease("current", "--quiet").err == ""  # the schema commands too
    assert sql_lease("check", "--json").err == ""


def test_sql_lease_quiet_in_the_environment_silences_it_for_a_whole_shell(
    sql_lease: Cli,
) -> None:
    result = sql_lease("get", "nothing", env={"SQL_LEASE_QUIET": "1"})
    assert result.code == 1 and result.err == ""
    assert result.out.strip() == "no live lease on nothing"
