"""Lease commands end to end, on a NUL-bearing thread key as Mastra builds them."""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import quote

from sqlalchemy.engine import make_url

from sql_lease import migrate

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
    listed = json.loads(out)
    assert [item["key"] for item in listed["leases"]] == [KEY] and listed["next_after"] is None
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
    shown = "postgresql+asyncpg://" + cli_url.split("://", 1)[1]
    assert result.code == 0 and result.err == f"sql-lease: using SQL_LEASE_DATABASE_URL: {shown}\n"
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
    assert json.loads(rest.out)["next_after"] is None  # the last page
    assert [item["key"] for item in json.loads(rest.out)["leases"]] == ["page\0c"]


def test_list_json_keeps_the_next_page_cursor(sql_lease: Cli, cli_url: str) -> None:
    for name in ("a", "b", "c"):
        assert sql_lease("acquire", rf"cursor\0{name}", "me", "--url", cli_url).code == 0
    first = sql_lease("list", "--prefix", r"cursor\0", "--limit", "2", "--json", "--url", cli_url)
    page = json.loads(first.out)
    assert first.code == 0 and first.err == ""
    assert [item["key"] for item in page["leases"]] == ["cursor\0a", "cursor\0b"]
    assert page["next_after"] == "cursor\0b"  # the exact key: pass it back escaped
    rest = sql_lease(
        "list", "--prefix", r"cursor\0", "--limit", "2", "--json", "--url", cli_url,
        "--after", r"cursor\x00b",
    )  # fmt: skip
    last = json.loads(rest.out)
    assert [item["key"] for item in last["leases"]] == ["cursor\0c"]
    assert last["next_after"] is None


def test_an_empty_prefix_lists_every_key_and_an_empty_list_exits_0(
    sql_lease: Cli, make_database: Callable[[], str]
) -> None:
    url = make_database()
    migrate.upgrade(url)
    empty = sql_lease("list", "--prefix", "", "--url", url)
    assert (empty.code, empty.out.strip()) == (0, "no live leases")  # nothing to show: still 0
    assert sql_lease("acquire", "one", "me", "--url", url).code == 0
    assert sql_lease("acquire", "two", "me", "--url", url).code == 0
    both = sql_lease("list", "--prefix", "", "--json", "--url", url)
    assert [item["key"] for item in json.loads(both.out)["leases"]] == ["one", "two"]


def test_a_missing_table_is_named_with_the_migrate_command_for_it(
    sql_lease: Cli, cli_url: str
) -> None:
    result = sql_lease("list", "--table", "nosuch", "--url", cli_url)
    assert result.code == 4
    assert len(result.err_lines) == 1
    assert "the leases table nosuch is missing" in result.err
    assert " --table nosuch`" in result.err
    other = sql_lease("get", "k", "--table", "nosuch", "--schema", "coord", "--url", cli_url)
    assert other.code == 4
    assert "table coord.nosuch" in other.err
    assert " --table nosuch --schema coord`" in other.err


def test_libpq_parameters_and_a_host_list_work_from_the_command_line(
    cli: Cli, cli_url: str
) -> None:
    url = make_url(cli_url)
    own = f"{url.host}:{url.port or 5432}"
    user = url.username or "postgres"
    auth = f"{user}:{quote(url.password, safe='')}" if url.password else user
    listed = (
        f"postgresql://{auth}@127.0.0.1:1,{own}/{url.database}?target_session_attrs=read-write"
        "&application_name=ops-cli&connect_timeout=10&options=-c%20statement_timeout%3D3000"
        "&keepalives_idle=60"
    )
    won = cli("acquire", "via-hosts", "ops", "--url", listed)
    assert (won.code, won.err) == (0, "")
    shown = cli("get", "via-hosts", "--url", listed, "--json")
    assert shown.code == 0 and json.loads(shown.out)["owner"] == "ops"
    assert cli("check", "--url", listed).code == 0  # the schema commands take it too


def test_list_and_get_show_metadata_and_every_holder_of_a_counting_key(
    sql_lease: Cli, cli_url: str
) -> None:
    import asyncio

    from sql_lease import SqlLeaseProvider

    async def setup() -> None:
        async with SqlLeaseProvider.from_url(cli_url) as p:
            await p.acquire_lease("meta", "m-owner", 60_000, metadata="host web-3")
            await p.acquire_lease("sem", "s1", 60_000, limit=2, metadata=b"\x01")
            await p.acquire_lease("sem", "s2", 60_000, limit=2)

    asyncio.run(setup())
    result = sql_lease("list", "--url", cli_url, "--json")
    assert result.code == 0, result.err
    listed = {(item["key"], item["owner"]): item for item in json.loads(result.out)["leases"]}
    assert set(listed) >= {("meta", "m-owner"), ("sem", "s1"), ("sem", "s2")}
    assert listed[("meta", "m-owner")]["metadata"] == "host web-3"
    assert listed[("sem", "s1")]["metadata"] == {"hex": "01"}
    assert "metadata" not in listed[("sem", "s2")]
    table = sql_lease("list", "--url", cli_url)
    assert "metadata" in table.out and "host web-3" in table.out and "s2" in table.out
    got = sql_lease("get", "meta", "--url", cli_url)
    assert "metadata host web-3" in got.out, got.out
