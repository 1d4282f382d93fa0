"""Rows another tool wrote with a key or owner that is not UTF-8 (issue 24, finding 5).

Reads that meet one raise `LeaseForeignRowError` (a `LeaseError`, a `LeaseDatabaseError` and a
`ValueError`) naming the key in hex, never a raw `UnicodeDecodeError`; `list_leases` and
``sql-lease list [--json]`` show such rows (hex, marked) and go on; a WTF-8 name (a lone
surrogate, stored with ``surrogatepass``) is not foreign. In every Python mode, PostgreSQL and
SQLite.
"""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

import sql_lease.sync
from sql_lease import (
    ForeignLease,
    LeaseDatabaseError,
    LeaseError,
    LeaseForeignRowError,
    SqlLeaseProvider,
    migrate,
)
from sql_lease.cli._app import run as cli_run
from tests.infra.pgbouncer import PgBouncer

from ._settings import server_dsn

MODES = ("async", "async_pooler", "sync", "sync_pooler", "sqlite", "sqlite_sync")
BAD_KEY = b"bad\xffkey"  # a key that is not UTF-8
BAD_OWNER = b"\xfe\xffowner"
SURROGATE = "wtf\udcff"  # legal: stored as WTF-8
TTL = 60_000


@pytest.fixture(scope="module")
def bouncer(pg_server: object) -> Iterator[PgBouncer]:
    with PgBouncer(pool_mode="transaction", pool_size=2) as found:
        yield found


@pytest.fixture(scope="module")
def foreign_url(make_database: Any) -> str:
    url: str = make_database()
    migrate.upgrade(url)
    return url


@pytest.fixture
def sqlite_file(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'leases.db'}"
    migrate.upgrade(url)
    return url


def _rewrite(url: str, statements: list[tuple[str, tuple[bytes, ...]]]) -> None:
    """Run ``statements`` as another tool would (placeholders ``?``), on either backend."""
    if url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(make_url(url).database or "")) as conn:
            for sql, args in statements:
                conn.execute(sql, args)
            conn.commit()
        return
    with psycopg.connect(server_dsn(url), autocommit=True) as pg:
        for sql, args in statements:
            pg.execute(sql.replace("?", "%s"), args)


def _plant(url: str) -> None:
    """Rows ``good`` (owner not UTF-8) and BAD_KEY (from ``badkey``), both live, plus a
    normal row and a WTF-8 one, written by the library first."""
    _rewrite(
        url,
        [
            ("UPDATE leases SET owner = ? WHERE key = ?", (BAD_OWNER, b"good")),
            ("UPDATE leases SET key = ? WHERE key = ?", (BAD_KEY, b"badkey")),
        ],
    )


async def _v(value: Any) -> Any:
    return await value if hasattr(value, "__await__") else value


@pytest.fixture(params=MODES)
async def provider(
    request: pytest.FixtureRequest, foreign_url: str, bouncer: PgBouncer, sqlite_file: str
) -> AsyncIterator[tuple[Any, str]]:
    mode = request.param
    url = sqlite_file if mode.startswith("sqlite") else foreign_url
    target = url
    pooler = None
    if mode.endswith("pooler"):
        target, pooler = bouncer.url(make_url(url).database or "postgres"), "transaction"
    found: Any
    if mode in ("async", "async_pooler", "sqlite"):
        found = SqlLeaseProvider.from_url(target, timeout=10, pooler=pooler)
    else:
        found = sql_lease.sync.SqlLeaseProvider.from_url(target, timeout=10, pooler=pooler)
    _rewrite(url, [("DELETE FROM leases", ())])
    for key, owner in (("good", "o"), ("badkey", "o"), ("normal", "n"), (SURROGATE, SURROGATE)):
        try:
            assert (await _v(found.acquire_lease(key, owner, TTL))).acquired
        except LeaseError:  # lone surrogates not yet accepted as names (another change)
            _rewrite(
                url,
                [
                    (
                        "UPDATE leases SET key = ?, owner = ? WHERE key = ?",
                        (
                            SURROGATE.encode("utf-8", "surrogatepass"),
                            SURROGATE.encode("utf-8", "surrogatepass"),
                            b"normal",
                        ),
                    )
                ],
            )
            assert (await _v(found.acquire_lease("normal", "n", TTL))).acquired
    _plant(url)
    yield found, url
    if isinstance(found, SqlLeaseProvider):
        await found.aclose()
    else:
        found.close()


def _check(err: pytest.ExceptionInfo[LeaseForeignRowError], key: bytes) -> None:
    assert isinstance(err.value, LeaseError)
    assert isinstance(err.value, LeaseDatabaseError) and isinstance(err.value, ValueError)
    assert key.hex() in str(err.value)
    assert not isinstance(err.value, UnicodeDecodeError)
    assert isinstance(err.value.__cause__, UnicodeDecodeError)  # chained, as every error


async def test_reads_of_a_foreign_owner_raise_a_lease_error_naming_the_key_in_hex(
    provider: tuple[Any, str],
) -> None:
    p, _ = provider
    with pytest.raises(LeaseForeignRowError) as err:
        await _v(p.get_lease_owner("good"))
    _check(err, b"good")
    with pytest.raises(LeaseForeignRowError) as err:
        await _v(p.get_lease("good"))
    _check(err, b"good")
    with pytest.raises(LeaseForeignRowError) as err:  # refused: the holder is foreign
        await _v(p.acquire_lease("good", "me", TTL))
    _check(err, b"good")
    # Nothing changed, and writes that name the key but return no name still work.
    assert await _v(p.renew_lease("good", "o", TTL)) is False
    assert await _v(p.force_release("good")) is True  # done, even though the owner is foreign
    assert await _v(p.get_lease_owner("good")) is None
    assert (await _v(p.acquire_lease("good", "me", TTL))).acquired


async def test_listing_shows_foreign_rows_in_hex_and_goes_on(provider: tuple[Any, str]) -> None:
    p, _ = provider
    listed = await _v(p.list_leases())
    by_key = {x.key: x for x in listed}
    assert by_key["normal"].owner == "n" and not isinstance(by_key["normal"], ForeignLease)
    surrogate = [x for x in listed if x.key.startswith("wtf")]
    assert len(surrogate) == 1, listed  # WTF-8 is not foreign
    assert surrogate[0].key == SURROGATE and not isinstance(surrogate[0], ForeignLease)
    bad_owner = by_key["good"]
    assert isinstance(bad_owner, ForeignLease)
    assert (bad_owner.owner_bytes, bad_owner.owner) == (BAD_OWNER, "\\x" + BAD_OWNER.hex())
    bad_key = by_key["\\x" + BAD_KEY.hex()]
    assert isinstance(bad_key, ForeignLease)
    assert (bad_key.key_bytes, bad_key.owner) == (BAD_KEY, "o")
    assert bad_key.fence > 0 and bad_key.expires_at > bad_key.acquired_at


def _cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_run(list(args))
    return code, out.getvalue()


@pytest.mark.parametrize("mode", ["postgresql", "pooler", "sqlite"])
def test_the_command_line_lists_foreign_rows_marked(
    mode: str, foreign_url: str, sqlite_file: str, bouncer: PgBouncer
) -> None:
    url = sqlite_file if mode == "sqlite" else foreign_url
    where = ["--url", url]
    if mode == "pooler":
        pooled = bouncer.url(make_url(url).database or "postgres")
        where = ["--url", pooled, "--pooler", "transaction"]
    _rewrite(url, [("DELETE FROM leases", ())])
    for key in ("good", "badkey", "normal"):
        assert _cli("acquire", key, "o", "--ttl", "60s", *where)[0] == 0
    _plant(url)
    code, out = _cli("list", "--json", *where)
    assert code == 0, out
    rows = {(r["key"], r.get("key_hex")): r for r in json.loads(out)["leases"]}
    assert rows[("normal", None)]["owner"] == "o" and "foreign" not in rows[("normal", None)]
    good = rows[("good", b"good".hex())]
    assert good["foreign"] is True and good["owner"] is None
    assert good["owner_hex"] == BAD_OWNER.hex()
    bad = rows[(None, BAD_KEY.hex())]
    assert bad["foreign"] is True and bad["owner"] == "o"
    code, out = _cli("list", *where)
    assert code == 0 and "normal" in out
    assert f"\\x{BAD_KEY.hex()} (not UTF-8)" in out and f"\\x{BAD_OWNER.hex()} (not UTF-8)" in out
    code, out = _cli("get", "good", "--json", *where)
    assert code != 0 and b"good".hex() in out
    assert "Traceback" not in out


async def test_an_unreadable_foreign_time_is_a_lease_error_and_its_connection_closes_cleanly(
    foreign_url: str, bouncer: PgBouncer, caplog: pytest.LogCaptureFixture
) -> None:
    pooled = bouncer.url(make_url(foreign_url).database or "postgres")
    async with SqlLeaseProvider.from_url(pooled, timeout=10, pooler="transaction") as p:
        _rewrite(foreign_url, [("DELETE FROM leases", ())])
        assert (await p.acquire_lease("forever", "o", TTL)).acquired
        _rewrite(
            foreign_url,
            [("UPDATE leases SET expires_at = 'infinity' WHERE key = ?", (b"forever",))],
        )
        with pytest.raises(LeaseDatabaseError, match="infinity"):
            await p.get_lease("forever")
        # The connection was dropped inside a greenlet: no MissingGreenlet traceback.
        assert "MissingGreenlet" not in caplog.text
        assert (await p.acquire_lease("next", "o", TTL)).acquired
