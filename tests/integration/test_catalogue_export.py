"""The exported statement catalogue (`sql-lease sql --json`) is the SQL the provider runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import asyncpg
import pytest
from sqlalchemy import event

from sql_lease import SqlLeaseProvider, migrate
from sql_lease._core.counting import MAX_KEYS, MAX_LIMIT, MAX_METADATA_BYTES, RESERVED_OWNER
from sql_lease._export import export_catalogue, exported_statements
from sql_lease.backends.postgres import functions
from sql_lease.backends.postgres.catalogue import build_catalogue, quote_ident
from sql_lease.schema import fence_sequence_name, notify_channel

NAMES = [("leases", None), ("jobs", "tenant_a"), ("t" * 40, "s" * 40)]
PG_TYPES = {"int8": "bigint", "int4": "integer", "bool": "boolean", "_bytea": "bytea[]"}


def render(sql: str, table: str, schema: str | None) -> str:
    """What a client in another language does with an exported statement."""
    prefix = "" if schema is None else quote_ident(schema) + "."
    return (
        sql.replace("{table}", prefix + quote_ident(table))
        .replace("{fence_sequence}", prefix + quote_ident(fence_sequence_name(table)))
        .replace("{channel}", notify_channel(table, schema))
    )


def statements() -> dict[str, Any]:
    result: dict[str, Any] = export_catalogue()["statements"]  # type: ignore[assignment]
    return result


def run_cli(seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run(
        [sys.executable, "-m", "sql_lease", "sql", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    return done.stdout


def test_export_is_deterministic_and_the_cli_prints_it() -> None:
    assert export_catalogue() == export_catalogue()
    first, second = run_cli("1"), run_cli("2")
    assert first == second
    assert json.loads(first) == export_catalogue()


@pytest.mark.parametrize(("table", "schema"), NAMES)
def test_rendered_statements_are_the_catalogue_of_that_table(
    table: str, schema: str | None
) -> None:
    built = build_catalogue(table, schema)
    exported = statements()
    assert set(exported) >= {"acquire", "get_owner", "get_lease", "release", "renew", "transfer"}
    assert set(exported) >= {"count_acquire", "count_holders", "acquire_all", "release_all"}
    ours = exported_statements(built)
    assert set(ours) == set(exported)
    for name, statement in exported.items():
        expected = ours[name]
        assert render(statement["sql"], table, schema) == expected.sql, name
        assert tuple(p["name"] for p in statement["params"]) == expected.params, name
        assert tuple(c["name"] for c in statement["columns"]) == expected.columns, name


@pytest.fixture(scope="module")
def schema_url(make_database: Callable[[], str]) -> str:
    url = make_database()
    migrate.upgrade(url, table_name="jobs", schema="tenant_a")
    return url


async def test_parameter_and_column_types_are_what_postgresql_describes(
    database_url: str,
) -> None:
    conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg", "postgresql"))
    try:
        for name, statement in statements().items():
            prepared = await conn.prepare(render(statement["sql"], "leases", None))
            params = [PG_TYPES.get(t.name, t.name) for t in prepared.get_parameters()]
            assert params == [p["type"] for p in statement["params"]], name
            columns = [
                (a.name, PG_TYPES.get(a.type.name, a.type.name)) for a in prepared.get_attributes()
            ]
            assert columns == [(c["name"], c["type"]) for c in statement["columns"]], name
    finally:
        await conn.close()


async def test_the_provider_sends_exactly_the_exported_statements(schema_url: str) -> None:
    exported = {render(s["sql"], "jobs", "tenant_a"): n for n, s in statements().items()}
    sent: list[str] = []
    provider = SqlLeaseProvider.from_url(schema_url, table_name="jobs", schema="tenant_a")

    @event.listens_for(provider.engine.sync_engine, "connect")
    def log_queries(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.driver_connection.add_query_logger(lambda q: sent.append(q.query))

    try:
        assert (await provider.acquire_lease("k\0x", "a", 30_000)).acquired
        assert not (await provider.acquire_lease("k\0x", "b", 30_000)).acquired
        assert not (await provider.acquire_lease("k\0x", "b", 30_000)).acquired  # reads first
        assert await provider.get_lease_owner("k\0x") == "a"
        assert (await provider.get_lease("k\0x")) is not None
        assert await provider.renew_lease("k\0x", "a", 30_000)
        assert await provider.renew_leases([("k\0x", "a")], 30_000) == [True]
        assert not (await provider.wait_for_lease("k\0x", "b", 1_000, timeout_ms=50)).acquired
        assert await provider.transfer_lease("k\0x", "a", "c", 30_000)
        await provider.release_lease("k\0x", "c")
        await provider.acquire_lease("k\0x", "d", 30_000)
        assert await provider.force_release("k\0x")
        assert await provider.list_leases() == []
        await provider.purge_expired(min_age_ms=0)
        await provider.now()
        # Counting leases, metadata, all-or-none: each counting statement once at least.
        assert (await provider.acquire_lease("s", "a", 30_000, limit=2, metadata="m")).acquired
        assert [h.owner for h in await provider.get_lease_holders("s")] == ["a"]
        assert await provider.renew_lease("s", "a", 30_000)  # a plain miss, then count_renew
        assert await provider.transfer_lease("s", "a", "b", 30_000)  # then count_transfer
        await provider.release_lease("s", "b")  # a plain miss, then count_release
        taken = await provider.acquire_leases(["x", "y"], "a", 30_000)  # ensure_rows first
        assert taken.acquired
        assert await provider.release_leases(["x", "y"], "a") == 2
    finally:
        await provider.aclose()
    assert sent, "the query logger saw nothing"
    # Leave out asyncpg's own type introspection and the listener's LISTEN (not a statement
    # of the catalogue): every statement on the table or the clock must be exported.
    ours = [q for q in sent if '"tenant_a"."jobs"' in q or "clock_timestamp" in q]
    assert [q for q in ours if q not in exported] == []
    assert {exported[q] for q in ours} == set(exported.values())


def test_the_counting_bounds_and_reserved_owner_are_exported() -> None:
    exported: dict[str, Any] = export_catalogue()
    limits = exported["limits"]
    assert (limits["max_limit"], limits["max_metadata_bytes"], limits["max_keys"]) == (
        MAX_LIMIT,
        MAX_METADATA_BYTES,
        MAX_KEYS,
    )
    assert bytes.fromhex(exported["counting"]["reserved_owner"]) == RESERVED_OWNER


@pytest.mark.parametrize(("table", "schema"), [n for n in NAMES if n[1] is not None])
def test_exported_calls_are_the_calls_pooler_mode_sends(table: str, schema: str) -> None:
    built = build_catalogue(table, schema)
    exported: dict[str, Any] = export_catalogue()["functions"]  # type: ignore[assignment]
    assert set(exported) == {
        "acquire",
        "renew",
        "release",
        "transfer",
        "get_owner",
        "get_lease",
        "holder",
    }
    names = {r.name: r for r in functions.routines(built, table)}
    for name, f in exported.items():
        function = f["name"].replace("{table_name}", table)
        assert tuple(f["arguments"]) == names[function].arguments, name
        qualified = f"{quote_ident(schema)}.{quote_ident(function)}"
        sent = built.server_calls[getattr(built, name).sql].call
        assert f["call"].replace("{function}", qualified) == sent, name
