"""Lease commands end to end, on a NUL-bearing thread key as Mastra builds them."""

from __future__ import annotations

import json

from .conftest import Cli

KEY_IN = r"res\0thread-1"  # as typed on a command line
KEY = "res\0thread-1"
KEY_SHOWN = r"res\x00thread-1"


def test_a_lease_lifecycle_from_the_command_line(sql_lease: Cli, cli_url: str) -> None:
    def run(*args: str) -> tuple[int, str]:
        result = sql_lease(*args, "--url", cli_url)
        assert result.err == "", result.err
        return result.code, result.out.strip()

    code, out = run("acquire", KEY_IN, "run-1", "--ttl", "15s")
    assert code == 0 and out.startswith(f"acquired {KEY_SHOWN} for run-1 (fence ")

    code, out = run("acquire", KEY_IN, "run-2")
    assert code == 1 and out.startswith(f"not acquired: {KEY_SHOWN} is held by run-1")

    code, out = run("get", KEY_SHOWN, "--json")  # the shown form reads back
    lease = json.loads(out)
    assert code == 0 and (lease["key"], lease["owner"]) == (KEY, "run-1")
    assert 0 < lease["expires_in_ms"] <= 15_000

    code, out = run("renew", KEY_IN, "run-2")
    assert code == 1 and "not renewed: run-2" in out and "held by run-1" in out
    code, out = run("renew", KEY_IN, "run-1", "--ttl", "2m", "--json")
    assert code == 0 and json.loads(out)["renewed"] is True

    code, out = run("transfer", KEY_IN, "run-1", "run-3", "--json")
    moved = json.loads(out)
    assert code == 0 and moved["transferred"] and moved["fence"] > lease["fence"]
    code, out = run("transfer", KEY_IN, "run-1", "run-4")
    assert code == 1 and out.startswith("not transferred: run-1 does not hold it")

    code, out = run("release", KEY_IN, "run-1")
    assert code == 1 and "held by run-3" in out  # not the owner: nothing changed

    code, out = run("list")
    assert code == 0 and KEY_SHOWN in out and "run-3" in out
    code, out = run("list", "--prefix", r"res\x00", "--json")
    assert [item["key"] for item in json.loads(out)] == [KEY]
    code, out = run("list", "--prefix", "other")
    assert (code, out) == (0, "no live leases")

    code, out = run("release", KEY_IN, "run-3")
    assert code == 0 and out.startswith(f"released {KEY_SHOWN}")
    code, out = run("get", KEY_IN)
    assert (code, out) == (1, f"no live lease on {KEY_SHOWN}")

    code, out = run("purge", "--min-age", "0s", "--json")
    assert code == 0 and json.loads(out)["purged"] >= 1


def test_force_release_ends_anyones_lease(sql_lease: Cli, cli_url: str) -> None:
    assert sql_lease("acquire", "stuck", "crashed", "--ttl", "1h", "--url", cli_url).code == 0
    forced = sql_lease("force-release", "stuck", "--url", cli_url)
    assert (forced.code, forced.out.strip()) == (0, "released stuck")
    again = sql_lease("force-release", "stuck", "--url", cli_url, "--json")
    assert again.code == 1 and json.loads(again.out) == {"released": False, "key": "stuck"}


def test_the_database_can_come_from_the_environment(sql_lease: Cli, cli_url: str) -> None:
    result = sql_lease("acquire", "from-env", "o", env={"SQL_LEASE_DATABASE_URL": cli_url})
    assert result.code == 0 and result.err == ""
    assert sql_lease("get", "from-env", "--url", cli_url).code == 0


def test_as_a_process_not_the_owner_exits_1(cli: Cli, cli_url: str) -> None:
    key = r"proc\0key"
    won = cli("acquire", key, "run-1", "--ttl", "1m", "--url", cli_url)
    assert (won.code, won.err) == (0, "")
    lost = cli("acquire", key, "run-2", "--url", cli_url, "--json")
    assert lost.code == 1 and lost.err == ""
    answer = json.loads(lost.out)
    assert (answer["acquired"], answer["key"], answer["owner"]) == (False, "proc\0key", "run-1")


def test_list_pages_with_after(sql_lease: Cli, cli_url: str) -> None:
    for name in ("a", "b", "c"):
        assert sql_lease("acquire", rf"page\0{name}", "me", "--url", cli_url).code == 0
    first = sql_lease("list", "--prefix", r"page\0", "--limit", "2", "--url", cli_url)
    assert first.code == 0
    assert r"page\x00a" in first.out and r"page\x00b" in first.out
    assert r"page\x00c" not in first.out
    assert r"next page: --after 'page\x00b'" in first.err  # the hint reads back as typed
    rest = sql_lease(
        "list", "--prefix", r"page\0", "--after", r"page\x00b", "--json", "--url", cli_url
    )
    assert rest.code == 0
    assert [item["key"] for item in json.loads(rest.out)] == ["page\0c"]
