"""Session settings cannot change results, in every Python mode (issue 24, findings 2 and 4).

Each case of `_settings.SETTINGS` is a database whose defaults (``ALTER DATABASE ... SET``)
change how text is read or written; the whole contract (`_settings.contract`) runs on it in
the async default mode (asyncpg, binary protocol), the async and sync pooler modes (through a
real PgBouncer in transaction pooling) and the sync default mode (psycopg), and through the
command line. Then settings another client left on a pooled server connection, and two
processes racing on hot keys under ``standard_conforming_strings=off`` and a non-ISO
``DateStyle``.
"""

from __future__ import annotations

import json
import multiprocessing
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

import sql_lease.sync
from sql_lease import SqlLeaseProvider, migrate
from sql_lease.cli._app import run as cli_run
from tests.infra.pgbouncer import PgBouncer
from tests.integration._race_workers import Event
from tests.integration.test_races import check_history
from tests.sync._workers import hammer

from ._settings import SETTINGS, Table, clone, contract, drop

MODES = ("async", "async_pooler", "sync", "sync_pooler")
LEFT_BEHIND = (
    "SET standard_conforming_strings = off",
    "SET DateStyle = 'SQL, DMY'",
    "SET IntervalStyle = sql_standard",
    "SET TimeZone = 'Asia/Kathmandu'",
    "SET extra_float_digits = -15",
    "SET bytea_output = escape",
    "SET backslash_quote = on",
    "SET client_encoding = 'SJIS'",
)


@pytest.fixture(scope="module")
def template_url(make_database: Callable[[], str]) -> str:
    """A migrated database that each case copies."""
    url = make_database()
    migrate.upgrade(url)
    return url


@pytest.fixture(scope="module")
def bouncer(pg_server: object) -> Iterator[PgBouncer]:
    with PgBouncer(pool_mode="transaction", pool_size=2) as found:
        yield found


@pytest.fixture(scope="module", params=list(SETTINGS))
def setting_url(request: pytest.FixtureRequest, template_url: str) -> Iterator[str]:
    """A copy of the migrated database with one case's defaults."""
    url = clone(template_url, SETTINGS[request.param], role=request.param.startswith("role_"))
    yield url
    drop(url)


def _database(url: str) -> str:
    return make_url(url).database or "postgres"


async def _provider(mode: str, url: str, bouncer: PgBouncer) -> Any:
    pooled = bouncer.url(_database(url))
    if mode == "async":
        return SqlLeaseProvider.from_url(url, timeout=10)
    if mode == "async_pooler":
        return SqlLeaseProvider.from_url(pooled, timeout=10, pooler="transaction")
    if mode == "sync":
        return sql_lease.sync.SqlLeaseProvider.from_url(url, timeout=10)
    return sql_lease.sync.SqlLeaseProvider.from_url(pooled, timeout=10, pooler="transaction")


async def _closed(provider: Any) -> None:
    if isinstance(provider, SqlLeaseProvider):
        await provider.aclose()
    else:
        provider.close()


@pytest.fixture
async def run_contract(bouncer: PgBouncer) -> AsyncIterator[Callable[[str, str], Any]]:
    opened: list[Any] = []

    async def run(mode: str, url: str) -> None:
        provider = await _provider(mode, url, bouncer)
        opened.append(provider)
        await contract(provider, Table(url))

    yield run
    for provider in opened:
        await _closed(provider)


@pytest.mark.parametrize("mode", MODES)
async def test_the_contract_holds_whatever_the_database_defaults(
    setting_url: str, mode: str, run_contract: Callable[[str, str], Any]
) -> None:
    await run_contract(mode, setting_url)


def _cli(*args: str) -> tuple[int, str]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_run(list(args))
    return code, out.getvalue()


@pytest.mark.parametrize("setting", ["scs_off", "datestyle_sql_dmy", "encoding_sjis"])
@pytest.mark.parametrize("pooler", [None, "transaction"])
def test_the_command_line_holds_whatever_the_database_defaults(
    template_url: str, bouncer: PgBouncer, setting: str, pooler: str | None
) -> None:
    url = clone(template_url, SETTINGS[setting])
    try:
        table = Table(url)
        table.reset()
        where = ["--url", url]
        if pooler:
            where = ["--url", bouncer.url(_database(url)), "--pooler", pooler]
        key = "cli\\'x"
        typed = "cli\\\\'x"  # the command line reads escapes
        code, out = _cli("acquire", typed, "A\\\\", "--ttl", "60s", "--json", *where)
        assert code == 0, out
        assert json.loads(out)["acquired"] is True
        code, out = _cli("renew", typed, "A\\\\", "--ttl", "90s", "--json", *where)
        assert code == 0, out
        code, out = _cli("get", typed, "--json", *where)
        got = json.loads(out)
        assert (got["key"], got["owner"]) == (key, "A\\")
        assert 80_000 < got["expires_in_ms"] <= 90_000
        code, out = _cli("list", "--json", *where)
        listed = {x["key"]: x["owner"] for x in json.loads(out)["leases"]}
        assert listed[key] == "A\\"
        assert table.rows()[key.encode()][0] == b"A\\"
        code, out = _cli("release", typed, "A\\\\", *where)
        assert code == 0, out
        assert key.encode() not in {k for k, (_, _, e) in table.rows().items() if e > table.now()}
    finally:
        drop(url)


@pytest.mark.parametrize("mode", ["async_pooler", "sync_pooler"])
async def test_settings_another_client_left_on_the_pooled_connection_change_nothing(
    template_url: str, mode: str
) -> None:
    url = clone(template_url, ())
    try:
        with PgBouncer(pool_mode="transaction", pool_size=1) as single:
            through = f"host=127.0.0.1 port={single.port} user=postgres dbname={_database(url)}"
            with psycopg.connect(through, autocommit=True, prepare_threshold=None) as other:
                for statement in LEFT_BEHIND:
                    other.execute(statement)
            with psycopg.connect(through, autocommit=True, prepare_threshold=None) as look:
                # The one server connection kept what the other client set.
                assert look.execute("SHOW bytea_output").fetchone() == ("escape",)
                assert look.execute("SHOW IntervalStyle").fetchone() == ("sql_standard",)
            pooled = single.url(_database(url))
            provider: Any
            if mode == "async_pooler":
                provider = SqlLeaseProvider.from_url(pooled, timeout=10, pooler="transaction")
            else:
                provider = sql_lease.sync.SqlLeaseProvider.from_url(
                    pooled, timeout=10, pooler="transaction"
                )
            try:
                await contract(provider, Table(url))
            finally:
                await _closed(provider)
    finally:
        drop(url)


RACE_SECONDS, RACE_ROUNDS, THREADS = 1.0, 4, 3


@pytest.fixture(scope="module")
def two_workers() -> Iterator[Any]:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["tests.sync._workers"])
    pool = ctx.Pool(2)
    try:
        yield pool
    finally:
        pool.terminate()
        pool.join()


@pytest.mark.race
@pytest.mark.parametrize("pooler", [None, "transaction"])
def test_two_processes_race_under_legacy_string_and_date_settings(
    template_url: str, bouncer: PgBouncer, two_workers: Any, pooler: str | None
) -> None:
    url = clone(template_url, ("standard_conforming_strings = off", "DateStyle = 'SQL, DMY'"))
    try:
        target = bouncer.url(_database(url)) if pooler else url
        run = uuid.uuid4().hex[:6]
        keys = [f"{run}\\x\0'a", f"{run}\\\\b", f"{run}'"]
        events: list[Event] = []
        for round_ in range(RACE_ROUNDS):
            pending = [
                two_workers.apply_async(
                    hammer, (target, round_ * 10 + w, keys, RACE_SECONDS, THREADS, pooler)
                )
                for w in range(2)
            ]
            events += [e for p in pending for e in p.get(timeout=120)["events"]]
            stats = check_history(events)  # 0 overlapping tenures, fences increasing
            by_op = Counter((e.op, e.ok) for e in events)
            if stats["tenures"] > 30 and by_op[("renew", True)] > 10:
                break
        assert stats["tenures"] > 30, stats
        assert by_op[("renew", True)] > 10 and by_op[("transfer", True)] > 0, dict(by_op)
        # Only the race's own keys were written (no mangled twin of one).
        written = {k for k in Table(url).rows() if k != b"\\x706c61696e"}
        assert written <= {k.encode() for k in keys}, written
    finally:
        drop(url)
