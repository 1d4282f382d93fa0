"""Expected failures: one line on stderr, a documented exit code, never a password."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sql_lease._core.install import pip_install

from .conftest import Cli

SECRET = "Sup3r-Secret"
CLOSED_PORT = f"postgresql://lease_user:{SECRET}@127.0.0.1:1/leases"


def assert_one_clean_line(err: str) -> None:
    assert len(err.splitlines()) == 1 and err.startswith("sql-lease"), err
    assert SECRET not in err and "Traceback" not in err


def test_as_a_process_an_unreachable_database_exits_3(cli: Cli) -> None:
    result = cli("get", "k", "--url", CLOSED_PORT, "--timeout", "3s")
    assert result.code == 3, result.err
    assert_one_clean_line(result.err)
    assert "127.0.0.1:1" in result.err and SECRET not in result.out


@pytest.mark.parametrize(
    "args",
    [
        ("acquire", "k", "o", "--ttl", "15s"),
        ("renew", "k", "o"),
        ("transfer", "k", "a", "b"),
        ("release", "k", "o"),
        ("force-release", "k"),
        ("list", "--json"),
        ("purge",),
        ("migrate",),
        ("current",),
        ("downgrade", "--yes"),
        ("check",),
        ("demo",),
    ],
)
def test_every_command_reports_an_unreachable_database_as_exit_3(
    sql_lease: Cli, args: tuple[str, ...]
) -> None:
    result = sql_lease(*args, "--url", CLOSED_PORT)
    assert result.code == 3, result.err
    assert_one_clean_line(result.err)
    if "--json" in args:  # a JSON error object instead of nothing
        assert json.loads(result.out) == {
            "error": result.err.partition("error: ")[2].strip(),
            "exit": 3,
        }
    else:
        assert result.out == ""


def test_as_a_process_a_bad_duration_exits_2(cli: Cli) -> None:
    result = cli("acquire", "k", "o", "--ttl", "15x")
    assert result.code == 2
    assert result.err_lines == [
        "sql-lease acquire: error: Invalid value for '--ttl': '15x' is not a duration: write a "
        "number and a unit, like 500ms, 15s, 2m (see --help)"
    ]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("acquire", "k", "o", "--ttl", "15"), "write a number and a unit"),
        (("renew", "k", "o", "--ttl", "0ms"), "at least 1ms"),
        (("acquire", "k", "o", "--ttl", "400d"), "'400d' is too long: at most 365d"),
        (("acquire", "k", "o", "--ttl", "9000h"), "'9000h' is too long: at most 8760h"),
        (
            ("get", "k", "--timeout", "2d"),
            "Invalid value for '--timeout': '2d' is too long: at most 1d",
        ),
        (("get", "k", "--timeout", "25h"), "at most 24h"),
        (("get", "k", "--timeout", "0s"), "Invalid value for '--timeout': '0s' is too short"),
        (("get", r"a\qb"), r"unknown escape \q"),
        (("get", ""), "must not be empty"),
        (("get", "x" * 1025), "1024"),
        (("list", "--prefix", "a\\"), "lone backslash"),
        (("acquire", "k"), "Missing argument 'OWNER'"),
        (("nonsense",), "No such command"),
        (("get", "k", "--url", f"oracle://u:{SECRET}@h/db"), "unsupported database URL scheme"),
        (("get", "k", "--url", f"mysql://u:{SECRET}@h/db"), "MySQL is not supported"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    sql_lease: Cli, args: tuple[str, ...], says: str
) -> None:
    result = sql_lease(*args)
    assert result.code == 2
    assert_one_clean_line(result.err)
    assert says in result.err


def test_the_help_lists_exit_codes(sql_lease: Cli) -> None:
    result = sql_lease("--help")
    assert result.code == 0
    assert "Exit codes:" in result.out and "3  database unreachable" in result.out


def test_without_the_cli_extra_a_clear_message_names_the_install_command() -> None:
    code = "import sys; sys.modules['click'] = None; from sql_lease.cli import main; main(['list'])"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 2
    assert pip_install("cli") in result.stderr and "Traceback" not in result.stderr
    assert "git+https://" in result.stderr  # the route that works before a release


def test_without_a_command_the_help_goes_to_stderr_with_exit_2(cli: Cli) -> None:
    result = cli()
    assert (result.code, result.out) == (2, "")
    assert result.err.startswith("Usage: sql-lease [OPTIONS] COMMAND")
    assert "\nCommands:\n" in result.err and "error:" not in result.err  # the help, as it is


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://postgres:hun@{SECRET}@127.0.0.1/appdb",
        f"postgresql://postgres:hun@{SECRET}:x@127.0.0.1/appdb",  # was a traceback
        f"postgresql://postgres:{SECRET}@127.0.0.1:5432x/appdb",
    ],
)
def test_as_a_process_a_password_with_an_unencoded_at_is_one_line_exit_2(
    cli: Cli, url: str
) -> None:
    result = cli("get", "k", "--url", url)
    assert result.code == 2, result.err
    assert_one_clean_line(result.err)
    assert "hun" not in result.err and "x@" not in result.err
    assert "%40" in result.err and result.out == ""


@pytest.mark.parametrize("env", [False, True])
def test_a_port_out_of_range_is_a_usage_error_before_connecting(sql_lease: Cli, env: bool) -> None:
    url = f"postgresql://lease_user:{SECRET}@127.0.0.1:65536/leases"
    result = (
        sql_lease("get", "k", env={"SQL_LEASE_DATABASE_URL": url})
        if env
        else sql_lease("get", "k", "--url", url)
    )
    assert result.code == 2
    assert_one_clean_line(result.err)
    source = "SQL_LEASE_DATABASE_URL" if env else "--url"
    assert f"error: {source}: the port in the database URL is out of range" in result.err


def test_an_unsupported_url_parameter_is_a_usage_error_naming_it(sql_lease: Cli) -> None:
    result = sql_lease(
        "check", "--url", f"postgresql://u:{SECRET}@127.0.0.1:1/db?statement_timeout=5"
    )
    assert result.code == 2
    assert_one_clean_line(result.err)
    assert "parameter statement_timeout is not supported" in result.err


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("acquire", "k", "o", "--ttl", "15x", "--json"), 2),
        (("get", "k", "--json", "--url", f"postgresql://u:a@{SECRET}@h/db"), 2),
        (("get", "k", "--json", "--url", CLOSED_PORT), 3),
    ],
)
def test_with_json_a_failure_prints_a_json_error_object(
    sql_lease: Cli, args: tuple[str, ...], code: int
) -> None:
    result = sql_lease(*args)
    assert result.code == code
    answer = json.loads(result.out)
    assert answer == {"error": result.err.partition("error: ")[2].strip(), "exit": code}
    assert SECRET not in result.out
