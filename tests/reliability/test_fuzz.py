"""Fuzzing every public entry point with arguments of every type (SPEC §4).

Whatever the arguments, only documented exceptions escape: `LeaseTypeError`/`LeaseValueError`
for bad input (the builtin they also are matches the kind of mistake) and, for database work,
`LeaseDatabaseError`s. A rejected call changes nothing: a lease held throughout keeps its owner,
fence and expiry. A password given in a URL never shows in a repr or an error message.

Validity is decided here from the specification (an oracle independent of the library's own
checks), so a check that is missing or too strict fails the test.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from sql_lease import (
    AcquireResult,
    InMemoryLeaseProvider,
    Lease,
    LeaseDatabaseError,
    LeaseError,
    LeaseTypeError,
    LeaseValueError,
    NoopLeaseProvider,
    SqlLeaseProvider,
    migrate,
)
from sql_lease._core.validate import MAX_NAME_BYTES, MAX_TTL_MS

from ._strategies import anything, bad_names, bad_ttls, names, ttls

HELD_KEY = "\0fuzz\0held"
HOLDER = "fuzz\0holder"
LONG = 3_600_000

METHODS: dict[str, tuple[str, ...]] = {
    "acquire_lease": ("key", "owner", "ttl_ms"),
    "get_lease_owner": ("key",),
    "get_lease": ("key",),
    "release_lease": ("key", "owner"),
    "renew_lease": ("key", "owner", "ttl_ms"),
    "transfer_lease": ("key", "from_owner", "to_owner", "ttl_ms"),
}
RETURNS: dict[str, Any] = {
    "acquire_lease": AcquireResult,
    "get_lease_owner": (str, type(None)),
    "get_lease": (Lease, type(None)),
    "release_lease": type(None),
    "renew_lease": bool,
    "transfer_lease": bool,
}
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")


# -- the oracle: SPEC §4 ---------------------------------------------------------------------


def name_problem(value: object) -> type[Exception] | None:
    if not isinstance(value, str):
        return TypeError
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return ValueError
    return None if 1 <= size <= MAX_NAME_BYTES else ValueError


def ttl_problem(value: object) -> type[Exception] | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return TypeError
    return None if 1 <= value <= MAX_TTL_MS else ValueError


def identifier_problem(value: object) -> type[Exception] | None:
    if not isinstance(value, str):
        return TypeError
    return None if IDENTIFIER.fullmatch(value) else ValueError


def seconds_problem(value: object) -> type[Exception] | None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return TypeError
    # Documented: above 0 and at most one day; NaN fails both comparisons.
    return None if 0 < value <= 86_400 else ValueError


def problem(param: str, value: object) -> type[Exception] | None:
    return ttl_problem(value) if param == "ttl_ms" else name_problem(value)


def check_rejection(exc: BaseException, problems: dict[str, type[Exception]]) -> None:
    """A rejected call raised a documented error that matches one of its argument problems."""
    assert isinstance(exc, LeaseTypeError | LeaseValueError), repr(exc)
    kinds = set(problems.values())
    assert isinstance(exc, tuple(kinds)), (exc, problems)
    assert any(param in str(exc) for param in problems), (exc, problems)


# -- provider methods ------------------------------------------------------------------------

name_args = st.one_of(names.filter(lambda s: s != HELD_KEY), bad_names)
ttl_args = st.one_of(ttls, bad_ttls)


@st.composite
def calls(draw: st.DrawFn, methods: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    method = draw(st.sampled_from(methods))
    args = {p: draw(ttl_args if p == "ttl_ms" else name_args) for p in METHODS[method]}
    return method, args


@dataclass
class Target:
    name: str
    provider: Any
    runner: asyncio.Runner
    stateful: bool
    cases: int = 0
    rejected: int = 0


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as r:
        yield r


@pytest.fixture(scope="module", params=["memory", "noop", "postgresql"])
def target(request: pytest.FixtureRequest, runner: asyncio.Runner) -> Iterator[Target]:
    if request.param == "memory":
        yield Target("memory", InMemoryLeaseProvider(), runner, True)
        return
    if request.param == "noop":
        yield Target("noop", NoopLeaseProvider(), runner, False)
        return
    url: str = request.getfixturevalue("database_url")
    provider = runner.run(_open(url))
    try:
        yield Target("postgresql", provider, runner, True)
    finally:
        runner.run(provider.aclose())


async def _open(url: str) -> SqlLeaseProvider:
    return SqlLeaseProvider.from_url(url, timeout=10, pool_size=2)


FUZZ = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_provider_methods_reject_bad_arguments_and_change_nothing(target: Target) -> None:
    run = target.runner.run
    p = target.provider
    methods = tuple(m for m in METHODS if hasattr(p, m))
    if target.stateful:
        held = run(p.acquire_lease(HELD_KEY, HOLDER, LONG))
        assert held.acquired

    @FUZZ
    @given(call=calls(methods))
    def fuzz(call: tuple[str, dict[str, Any]]) -> None:
        method, args = call
        target.cases += 1
        problems = {
            param: kind for param, v in args.items() if (kind := problem(param, v)) is not None
        }
        try:
            result = run(getattr(p, method)(*args.values()))
        except LeaseError as exc:
            if problems:
                target.rejected += 1
                check_rejection(exc, problems)
            else:
                raise AssertionError(f"valid call {method}{tuple(args.values())!r} raised") from exc
        else:
            assert not problems, f"{method} accepted {args!r} (problems: {problems})"
            assert isinstance(result, RETURNS[method]), (method, result)
        if target.stateful:
            lease = run(p.get_lease(HELD_KEY))
            assert lease is not None
            assert (lease.owner, lease.fence, lease.expires_at) == (
                HOLDER,
                held.fence,
                held.expires_at,
            )

    fuzz()
    print(f"{target.name}: {target.cases} fuzzed calls, {target.rejected} rejected")
    assert target.rejected > target.cases // 4


# -- constructors ----------------------------------------------------------------------------


def either(valid: st.SearchStrategy[Any], invalid: st.SearchStrategy[Any]) -> Any:
    """Valid or invalid with even odds (``one_of`` would weigh every flattened branch alike)."""
    return st.booleans().flatmap(lambda ok: valid if ok else invalid)


# Valid table and schema names: up to the documented 40 characters.
VALID_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")
identifiers = either(
    st.one_of(
        st.from_regex(VALID_NAME, fullmatch=True),
        st.sampled_from(["leases", "select", "user", "Leases", "_", "a" * 30]),
    ),
    st.sampled_from(
        [
            "a" * 41,
            'leases"; DROP TABLE leases; --',
            "leases; DROP TABLE x",
            "a b",
            "a.b",
            "a-b",
            "1abc",
            "",
            "caf\u00e9",
            "tab\tle",
            "le\0ases",
            '"leases"',
            "pg_catalog.pg_class",
        ]
    )
    | anything,
)
seconds = either(
    st.floats(min_value=0.001, max_value=60) | st.integers(1, 60),
    st.floats(allow_nan=True, allow_infinity=True) | st.integers(-10, 0) | anything,
)


@pytest.fixture(scope="module")
def engines(database_url: str, runner: asyncio.Runner) -> Iterator[list[Any]]:
    url = make_url(database_url)
    good = create_async_engine(url.set(drivername="postgresql+asyncpg"))
    psycopg_async = create_async_engine(url.set(drivername="postgresql+psycopg"))
    sync = create_engine(url.set(drivername="postgresql+psycopg"))
    yield [good, psycopg_async, sync, None, database_url, object(), good.sync_engine]
    runner.run(good.dispose())
    runner.run(psycopg_async.dispose())
    sync.dispose()


def test_constructor_accepts_exactly_the_documented_arguments(
    engines: list[Any], runner: asyncio.Runner
) -> None:
    good = engines[0]
    stats = {"cases": 0, "built": 0, "calls": 0}

    @FUZZ
    @given(
        engine=either(st.just(engines[0]), st.sampled_from(engines[1:])),
        table=identifiers,
        schema=st.one_of(st.none(), identifiers),
        timeout=seconds,
    )
    def fuzz(engine: Any, table: Any, schema: Any, timeout: Any) -> None:
        stats["cases"] += 1
        problems = {
            "table_name": identifier_problem(table),
            "schema": None if schema is None else identifier_problem(schema),
            "timeout": seconds_problem(timeout),
            "engine": None if engine is good else (TypeError, ValueError),
        }
        try:
            provider = SqlLeaseProvider(engine, table_name=table, schema=schema, timeout=timeout)
        except LeaseError as exc:
            assert isinstance(exc, LeaseTypeError | LeaseValueError), repr(exc)
            assert any(problems.values()), f"valid arguments rejected: {exc!r}"
            return
        assert not any(problems.values()), f"accepted: {problems}"
        stats["built"] += 1
        assert isinstance(engine, AsyncEngine)
        if timeout <= 5:  # a real call: it fails cleanly (no such table, too short a timeout)
            stats["calls"] += 1
            try:
                owner = runner.run(provider.get_lease_owner("fuzz"))
            except LeaseDatabaseError:
                pass
            else:
                assert owner is None

    fuzz()
    print(stats)
    assert stats["built"] > 10 and stats["calls"] > 5, stats


MARK = "S3cr3tPw"
hosts = st.sampled_from(["127.0.0.1", "localhost", "db.internal", "[::1]", "h"])
query_values = st.text(st.characters(codec="ascii", exclude_categories=("Cc",)), max_size=6)
GOOD_SCHEMES = ["postgresql", "postgres", "postgresql+asyncpg", "postgres+asyncpg"]


@st.composite
def urls(draw: st.DrawFn, schemes: list[str] = GOOD_SCHEMES) -> str:
    """A URL with a (percent-encoded) password; host, port, database and query vary."""
    scheme = draw(st.sampled_from(schemes))
    user = quote(draw(st.text(max_size=5)), safe="")
    password = quote(MARK + draw(st.text(max_size=8)), safe="")
    port = draw(st.one_of(st.none(), st.integers(1, 65535)))
    db = quote(draw(st.text(max_size=6)), safe="")
    modes = st.sampled_from(["disable", "allow", "prefer", "require", "verify-ca", "verify-full"])
    query = draw(
        st.lists(
            st.tuples(st.sampled_from(["sslmode", "ssl"]), modes)
            | st.tuples(st.just("application_name"), query_values),
            max_size=2,
            unique_by=lambda item: item[0],
        )
    )
    q = "&".join(f"{k}={quote(v, safe='')}" for k, v in query)
    netloc = f"{user}:{password}@{draw(hosts)}" + ("" if port is None else f":{port}")
    return f"{scheme}://{netloc}/{db}" + (f"?{q}" if q else "")


VALID = {
    "url": urls(),
    "table_name": st.from_regex(VALID_NAME, fullmatch=True),
    "schema": st.none() | st.from_regex(VALID_NAME, fullmatch=True),
    "timeout": st.floats(min_value=0.001, max_value=60) | st.integers(1, 60),
    "connect_timeout": st.floats(min_value=0.001, max_value=60) | st.integers(1, 60),
}
INVALID = {
    "url": (urls(["mysql", "", "x", "postgresql+psycopg"]) | anything).filter(
        lambda v: v is not None
    ),
    "table_name": identifiers.filter(lambda v: identifier_problem(v) is not None),
    "schema": identifiers.filter(lambda v: v is not None and identifier_problem(v) is not None),
    "timeout": seconds.filter(lambda v: seconds_problem(v) is not None),
    "connect_timeout": seconds.filter(lambda v: seconds_problem(v) is not None),
}


@st.composite
def from_url_args(draw: st.DrawFn) -> tuple[set[str], dict[str, Any]]:
    """Arguments for `from_url` with zero, one or two of them bad (and which)."""
    bad = draw(st.sets(st.sampled_from(sorted(VALID)), max_size=2))
    return bad, {p: draw(INVALID[p] if p in bad else VALID[p]) for p in VALID}


def assert_no_password(*texts: str) -> None:
    for text in texts:
        assert MARK not in text, text


def test_from_url_rejects_bad_arguments_and_never_shows_the_password(
    runner: asyncio.Runner,
) -> None:
    stats = {"cases": 0, "built": 0}

    @FUZZ
    @given(case=from_url_args())
    def fuzz(case: tuple[set[str], dict[str, Any]]) -> None:
        bad, args = case
        stats["cases"] += 1
        url = args.pop("url")
        try:
            provider = SqlLeaseProvider.from_url(url, **args)
        except LeaseError as exc:
            assert isinstance(exc, LeaseTypeError | LeaseValueError), repr(exc)
            assert bad, f"valid arguments rejected: {exc!r}"
            assert_no_password(str(exc), repr(exc), repr(exc.__cause__), repr(exc.__context__))
            return
        assert not bad, f"from_url accepted bad {bad}: {args!r}, url={url!r}"
        stats["built"] += 1
        assert_no_password(repr(provider), str(provider.engine.url), repr(provider.engine))
        runner.run(provider.aclose())

    fuzz()
    print(stats)
    assert stats["built"] > 20, stats


@st.composite
def migrate_args(draw: st.DrawFn) -> tuple[set[str], Any, Any, Any]:
    bad = draw(st.sets(st.sampled_from(["url", "table_name", "schema"]), max_size=2))
    url = draw(INVALID["url"] if "url" in bad else st.none() | VALID["url"])
    table = draw(INVALID["table_name"] if "table_name" in bad else VALID["table_name"])
    schema = draw(INVALID["schema"] if "schema" in bad else VALID["schema"])
    return bad, url, table, schema


def test_migration_functions_validate_their_arguments() -> None:
    stats = {"cases": 0, "sql": 0, "offline": 0}

    @settings(FUZZ, max_examples=120)  # each offline run loads Alembic: keep it short
    @given(case=migrate_args())
    def fuzz(case: tuple[set[str], Any, Any, Any]) -> None:
        bad, url, table, schema = case
        stats["cases"] += 1
        try:
            sql = migrate.upgrade(url, table_name=table, schema=schema, sql=True)
        except LeaseError as exc:
            assert isinstance(exc, LeaseTypeError | LeaseValueError), repr(exc)
            assert bad, f"valid arguments rejected: {exc!r}"
            assert_no_password(str(exc), repr(exc))
        else:
            assert not bad, f"migrations accepted bad {bad}: {url!r} {table!r} {schema!r}"
            assert isinstance(sql, str) and "CREATE TABLE" in sql
            assert_no_password(sql)
            stats["sql"] += 1
            if schema is not None:
                assert f'CREATE SCHEMA IF NOT EXISTS "{schema}"' in sql
        if {"table_name", "schema"} & bad:
            with pytest.raises((LeaseTypeError, LeaseValueError)):
                migrate.MigrationNames(table, schema)
            with pytest.raises((LeaseTypeError, LeaseValueError)):
                migrate.downgrade(url, "0001:base", table_name=table, schema=schema, sql=True)
        # A URL that is not a PostgreSQL URL fails before any I/O.
        if "url" in bad:
            stats["offline"] += 1
            for fn in (migrate.current, migrate.check):
                with pytest.raises((LeaseTypeError, LeaseValueError)):
                    fn(url, table_name=table, schema=schema)

    fuzz()
    print(stats)
    assert stats["sql"] > 15 and stats["offline"] > 15, stats
