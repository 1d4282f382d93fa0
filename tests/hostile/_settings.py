"""Hostile session settings: databases whose defaults change how text is read and written,
and the lease contract run against them in every Python mode.

`SETTINGS` names each case by the ``ALTER DATABASE ... SET`` clauses that make it. `clone`
copies a migrated template database (fast) and applies them; `contract` runs the contract on
any provider (async or sync) and checks the table itself with a plain connection that reads
numbers and hex only (nothing a setting can change), so a statement that wrote the wrong row
or an expiry off by a time zone is caught, not only one that raised.
"""

from __future__ import annotations

import inspect
import uuid
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from sql_lease import Lease

#: Name -> the database defaults (``ALTER DATABASE d SET <clause>``) of that case; a name
#: starting with ``role_``: the role's defaults in that database (``ALTER ROLE ... IN
#: DATABASE d SET``).
SETTINGS: dict[str, tuple[str, ...]] = {
    "scs_off": ("standard_conforming_strings = off", "escape_string_warning = off"),
    "datestyle_sql_dmy": ("DateStyle = 'SQL, DMY'",),
    "datestyle_german": ("DateStyle = 'German'",),
    "datestyle_postgres": ("DateStyle = 'Postgres, MDY'",),
    "intervalstyle_sql_standard": ("IntervalStyle = sql_standard",),
    "timezone_kathmandu": ("TimeZone = 'Asia/Kathmandu'",),
    "timezone_plus14": ("TimeZone = '+14'",),
    "extra_float_digits_low": ("extra_float_digits = -15",),
    "extra_float_digits_high": ("extra_float_digits = 3",),
    "bytea_output_escape": ("bytea_output = escape",),
    "all_at_once": (
        "standard_conforming_strings = off",
        "DateStyle = 'SQL, DMY'",
        "IntervalStyle = sql_standard",
        "TimeZone = 'Asia/Kathmandu'",
        "extra_float_digits = -15",
        "bytea_output = escape",
        "backslash_quote = on",
    ),
    "role_legacy": (
        "standard_conforming_strings = off",
        "DateStyle = 'German'",
        "client_encoding = 'SJIS'",
        "backslash_quote = on",
    ),
}
#: Client encodings (client-only ones first: their second bytes include the backslash).
ENCODINGS = ("SJIS", "BIG5", "GBK", "GB18030", "UHC", "LATIN1", "WIN1252", "EUC_JP", "KOI8R")
for _name in ENCODINGS:
    SETTINGS[f"encoding_{_name.lower()}"] = (f"client_encoding = '{_name}'", "backslash_quote = on")

#: Keys with what text settings mangle: backslashes (alone, before x, doubled), quotes, NUL,
#: bytea's hex prefix as text, and a character whose SJIS form ends in a backslash byte.
KEYS = ("plain", "back\\slash", "quo'te", "\\\\x706c61696e", "e\\\\'x", "nul\0k", "ソ表\\'")
#: A row the contract never names, whose key is what a doubled backslash would make of
#: ``plain`` (the text ``\x706c61696e``, issue 24): it must never be touched.
TRAP_KEY = b"\\x706c61696e"
TTL_MS = 60_000
TOLERANCE_S = 5.0  # a loaded machine: the database clock is read after the call


def server_dsn(url: str) -> str:
    """A libpq DSN for ``url`` (a SQLAlchemy URL string)."""
    parsed = make_url(url)
    return (
        f"host={parsed.host} port={parsed.port or 5432} user={parsed.username or 'postgres'} "
        f"dbname={parsed.database}"
    )


def clone(template_url: str, clauses: tuple[str, ...], *, role: bool = False) -> str:
    """A copy of the migrated database at ``template_url`` with ``clauses`` as its defaults
    (``role``: as the connecting role's defaults in that database)."""
    parsed = make_url(template_url)
    name = f"sql_lease_hostile_{uuid.uuid4().hex[:10]}"
    admin = server_dsn(template_url).replace(f"dbname={parsed.database}", "dbname=postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{parsed.database}"')
        target = f'ROLE "{parsed.username or "postgres"}" IN DATABASE' if role else "DATABASE"
        for clause in clauses:
            conn.execute(f'ALTER {target} "{name}" SET {clause}')
    return parsed.set(database=name).render_as_string(hide_password=False)


def drop(url: str) -> None:
    parsed = make_url(url)
    admin = server_dsn(url).replace(f"dbname={parsed.database}", "dbname=postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)')


class Table:
    """The leases table read and written with numbers and hex only (setting-proof)."""

    def __init__(self, url: str) -> None:
        # Its own settings pinned at connect: what this connection reads is not under test.
        self.dsn = server_dsn(url) + (
            " options='-c standard_conforming_strings=on -c extra_float_digits=3'"
        )

    def _run(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn, autocommit=True, client_encoding="UTF8") as conn:
            cur = conn.execute(sql, args)
            return cur.fetchall() if cur.description else []

    def reset(self) -> None:
        self._run("TRUNCATE leases")
        self._run(
            "INSERT INTO leases (key, owner, fence, expires_at, acquired_at) VALUES "
            "(decode(%s, 'hex'), decode(%s, 'hex'), 1, clock_timestamp() + interval '1 hour',"
            " clock_timestamp())",
            (TRAP_KEY.hex(), b"A".hex()),
        )

    def now(self) -> float:
        """The database clock as seconds since the epoch."""
        return float(self._run("SELECT extract(epoch FROM clock_timestamp())::float8")[0][0])

    def rows(self) -> dict[bytes, tuple[bytes, int, float]]:
        """Every row: key -> (owner, fence, expiry in epoch seconds)."""
        found = self._run(
            "SELECT encode(key, 'hex'), encode(owner, 'hex'), fence,"
            " extract(epoch FROM expires_at)::float8 FROM leases"
        )
        return {bytes.fromhex(k): (bytes.fromhex(o), f, float(e)) for k, o, f, e in found}

    def insert(self, key: bytes, owner: bytes, ttl_s: float = 3600) -> None:
        self._run(
            "INSERT INTO leases (key, owner, fence, expires_at, acquired_at) VALUES "
            "(decode(%s, 'hex'), decode(%s, 'hex'), nextval('leases_fence_seq'),"
            " clock_timestamp() + %s * interval '1 second', clock_timestamp())",
            (key.hex(), owner.hex(), ttl_s),
        )


async def _v(value: Any) -> Any:
    """A call's result, awaited when the provider is async."""
    return await value if inspect.isawaitable(value) else value


def _close(at: float, expected: float, what: str) -> None:
    assert abs(at - expected) < TOLERANCE_S, f"{what}: {at} is not the database's {expected}"


async def contract(p: Any, table: Table) -> None:
    """The lease contract on ``p`` (async or sync) over `KEYS`, checked by ``p``'s answers and
    by the table itself."""
    table.reset()
    trap = table.rows()[TRAP_KEY]
    fences: dict[str, int] = {}
    for key in KEYS:
        got = await _v(p.acquire_lease(key, "A", TTL_MS))
        assert got.acquired and got.owner == "A", (key, got)
        _close(got.expires_at.timestamp(), table.now() + TTL_MS / 1000, f"acquire {key!r}")
        fences[key] = got.fence
        refused = await _v(p.acquire_lease(key, "B\\'", TTL_MS))
        assert not refused.acquired and refused.owner == "A", (key, refused)
        assert refused.fence == got.fence
        assert await _v(p.get_lease_owner(key)) == "A"
    rows = table.rows()
    for key in KEYS:
        owner, fence, _ = rows[key.encode()]
        assert (owner, fence) == (b"A", fences[key]), key
    assert len(rows) == len(KEYS) + 1  # nothing else written

    assert await _v(p.renew_lease("plain", "A", TTL_MS)) is True
    assert await _v(p.renew_lease("plain", "B\\'", TTL_MS)) is False
    items = [(key, "A") for key in KEYS] + [("plain", "B\\'"), ("absent\\", "A")]
    before = table.now()
    renewed = await _v(p.renew_leases(items, TTL_MS * 2))
    assert renewed == [True] * len(KEYS) + [False, False], renewed
    many = await _v(p.renew_many([(KEYS[1], "A"), (KEYS[2], "A")], TTL_MS * 2))
    assert [r.fence for r in many] == [fences[KEYS[1]], fences[KEYS[2]]]
    rows = table.rows()
    for key in KEYS:
        _close(rows[key.encode()][2], before + TTL_MS * 2 / 1000, f"renewed {key!r}")
    assert rows[TRAP_KEY] == trap, "a renewal touched a row it did not name"

    lease: Lease = await _v(p.get_lease(KEYS[3]))
    assert (lease.key, lease.owner, lease.fence) == (KEYS[3], "A", fences[KEYS[3]])
    _close(lease.expires_at.timestamp(), rows[KEYS[3].encode()][2], "get_lease expires_at")
    assert lease.acquired_at <= lease.expires_at
    _close((await _v(p.now())).timestamp(), table.now(), "now()")

    assert await _v(p.transfer_lease(KEYS[0], "A", "C'\\", TTL_MS)) is True
    moved = await _v(p.get_lease(KEYS[0]))
    assert moved.owner == "C'\\" and moved.fence > fences[KEYS[0]]
    assert await _v(p.transfer_lease(KEYS[0], "A", "D", TTL_MS)) is False
    assert table.rows()[KEYS[0].encode()][:2] == (b"C'\\", moved.fence)

    await _v(p.release_lease(KEYS[1], "A"))
    assert await _v(p.get_lease_owner(KEYS[1])) is None
    listed = await _v(p.list_leases())
    expected = dict.fromkeys(KEYS[2:], "A") | {KEYS[0]: "C'\\"}
    assert {x.key: x.owner for x in listed if x.key.encode() != TRAP_KEY} == expected
    assert await _v(p.force_release(KEYS[2])) is True
    assert await _v(p.get_lease_owner(KEYS[2])) is None
    assert table.rows()[TRAP_KEY] == trap
