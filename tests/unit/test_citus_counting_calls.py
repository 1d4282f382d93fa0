"""What a Citus coordinator gets for the counting statements (no server needed): the calls of
migration 0011's functions, never a refusal; the one-key ones by the key (delegated), the
all-or-none ones with their keys' array as text; and the calls match the functions 0011
creates (names, arities, which are distributed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import psycopg
import pytest

from sql_lease.backends.postgres import citus
from sql_lease.backends.postgres.catalogue import build_catalogue
from sql_lease.backends.postgres.citus_calls import COUNTING_ONE_KEY, COUNTING_SEVERAL_KEYS
from sql_lease.backends.postgres.pooler_text import PoolerStatements
from sql_lease.catalogue import Catalogue, CountingStatements

REVISION = Path(__file__).parents[2] / "migrations" / "versions" / "0011_citus_counting.py"


def _revision() -> ModuleType:
    spec = importlib.util.spec_from_file_location("revision_0011_under_test", REVISION)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _detected() -> citus.Detected:
    found = citus.Detected()
    found.citus = True
    found.tables = frozenset({("app", "jobs")})
    return found


def _counting(cat: Catalogue) -> CountingStatements:
    assert cat.counting is not None
    return cat.counting


ONE_KEY_ARGS: dict[str, tuple[object, ...]] = {
    "acquire": (b"k", b"o", 5_000, 3, b"m", False),
    "holders": (b"k",),
    "renew": (b"k", b"o", 5_000),
    "release": (b"k", b"o"),
    "transfer": (b"k", b"o", b"p", 5_000, None, None),
}


@pytest.mark.parametrize("name", sorted(ONE_KEY_ARGS))
def test_each_one_key_counting_statement_goes_as_its_function_s_call(name: str) -> None:
    cat = build_catalogue("jobs", "app")
    statement = getattr(_counting(cat), name)
    args = ONE_KEY_ARGS[name]
    planned = _detected().plan(cat, statement.sql, args)
    arguments = ", ".join(f"${n}" for n in range(1, len(args) + 1))
    assert planned == [(f'SELECT * FROM "app"."jobs_count_{name}"({arguments})', args)]


@pytest.mark.parametrize("keys", [[b"a"], [b"a", b"\x00b", b"c"]])
def test_all_or_none_statements_go_as_one_coordinator_call_with_the_keys_as_text(
    keys: list[bytes],
) -> None:
    """One call whatever the keys' workers (the function spans them in one transaction), the
    keys' array as its text (asyncpg never looks an array type up on Citus)."""
    cat = build_catalogue("jobs", "app")
    counting = _counting(cat)
    detected = _detected()
    n = len(keys)
    text = '{"\\\\x61"}' if n == 1 else '{"\\\\x61","\\\\x0062","\\\\x63"}'
    cast = "$1::pg_catalog.text::pg_catalog.bytea[]"
    assert detected.plan(cat, counting.acquire_all(n).sql, (keys, b"o", 5_000)) == [
        (f'SELECT * FROM "app"."jobs_count_acquire_all"({cast}, $2, $3)', (text, b"o", 5_000))
    ]
    assert detected.plan(cat, counting.release_all(n).sql, (keys, b"o")) == [
        (f'SELECT * FROM "app"."jobs_count_release_all"({cast}, $2)', (text, b"o"))
    ]
    assert counting.ensure is not None
    assert detected.plan(cat, counting.ensure(n).sql, (keys,)) == [
        (f'SELECT * FROM "app"."jobs_count_ensure"({cast})', (text,))
    ]


def test_no_counting_statement_is_refused_or_sent_as_its_text_on_citus() -> None:
    cat = build_catalogue("jobs", "app")
    counting = _counting(cat)
    assert cat.distributed is not None
    texts = [getattr(counting, name).sql for name, _ in COUNTING_ONE_KEY]
    texts += [counting.acquire_all(2).sql, counting.release_all(2).sql]
    assert counting.ensure is not None
    texts.append(counting.ensure(2).sql)
    for sql in texts:
        call = _detected().call_for(cat, sql)
        assert call != sql and call.startswith('SELECT * FROM "app"."jobs_count_'), sql
    assert not hasattr(cat.distributed, "refused")


def test_the_calls_match_the_functions_of_migration_0011() -> None:
    """Each call names a function 0011 creates, with its arity; the one-key ones are exactly
    those 0011 distributes by the key, the all-or-none ones its coordinator functions."""
    revision = _revision()
    one_key = {suffix: len(arguments) for suffix, arguments, _, _ in revision.ONE_KEY}
    several = {suffix: tuple(arguments) for suffix, arguments, _, _ in revision.SEVERAL_KEYS}
    assert one_key == {f"count_{name}": arity for name, arity in COUNTING_ONE_KEY}
    assert several == {f"count_{name}": types for name, types in COUNTING_SEVERAL_KEYS}
    for _, arguments, _, body in revision.ONE_KEY:
        assert arguments[0] == "bytea" and "l.key = $1" in body  # distributed by the key
    for _, _, _, body in revision.SEVERAL_KEYS:
        assert "ORDER BY u.uk" in body  # rows locked in key order


def test_0011_fences_rise_from_the_row_the_clock_and_the_floor() -> None:
    """A new grant's fence is 0008's (row + 1, the clock in µs, the floor): no sequence, no
    timeline bits, which a shard move or a worker's failover would reorder."""
    revision = _revision()
    bodies = [body for _, _, _, body in (*revision.ONE_KEY, *revision.SEVERAL_KEYS)]
    assert not any("nextval" in b or "pg_walfile_name" in b for b in bodies)
    granting = [b for s, _, _, b in revision.ONE_KEY if s in ("count_acquire", "count_transfer")]
    assert all("GREATEST(c.fence + 1, now_us, @floor@)" in b for b in granting)
    acquire_all = {s: b for s, _, _, b in revision.SEVERAL_KEYS}["count_acquire_all"]
    assert "GREATEST(l.fence + 1, now_us, @floor@)" in acquire_all


def test_pooler_mode_switches_to_0011_s_calls_when_citus_refuses_a_counting_statement() -> None:
    cat = build_catalogue("jobs", "app")
    counting = _counting(cat)
    statements = PoolerStatements(10.0, lambda: cat)
    assert statements.call_for(counting.acquire.sql) is None  # plain PostgreSQL: the text
    refused = psycopg.errors.FeatureNotSupported("must be marked IMMUTABLE")
    assert statements.to_citus(counting.acquire.sql, refused)
    assert statements.call_for(counting.acquire.sql) == (
        'SELECT * FROM "app"."jobs_count_acquire"($1, $2, $3, $4, $5, $6)'
    )
    call = statements.call_for(counting.acquire_all(3).sql)
    assert call is not None and call.startswith('SELECT * FROM "app"."jobs_count_acquire_all"(')
