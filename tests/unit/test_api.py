"""The public surface, structural detection and the noop provider (no database)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

import sql_lease
from sql_lease import (
    NOOP_LEASE_PROVIDER,
    AcquireResult,
    InMemoryLeaseProvider,
    LeaseError,
    LeaseProvider,
    NoopLeaseProvider,
    SqlLeaseProvider,
    is_lease_provider,
    lease_provider_or_noop,
)

PUBLIC = {
    "LeaseProvider",
    "AcquireResult",
    "Lease",
    "is_lease_provider",
    "lease_provider_or_noop",
    "NoopLeaseProvider",
    "NOOP_LEASE_PROVIDER",
    "InMemoryLeaseProvider",
    "SqlLeaseProvider",
    "LeaseError",
    "LeaseTypeError",
    "LeaseValueError",
    "LeaseDatabaseError",
    "LeaseConnectionError",
    "LeaseTimeoutError",
    "LeaseSchemaError",
    "LeaseClosedError",
    "LeaseAlreadyHeld",
    "lease_table",
}


def test_every_public_name_is_exported() -> None:
    assert set(sql_lease.__all__) >= PUBLIC
    for name in sql_lease.__all__:
        assert hasattr(sql_lease, name), name


def test_error_hierarchy_matches_builtins() -> None:
    assert issubclass(sql_lease.LeaseTypeError, TypeError)
    assert issubclass(sql_lease.LeaseValueError, ValueError)
    assert issubclass(sql_lease.LeaseTimeoutError, TimeoutError)
    assert issubclass(sql_lease.LeaseConnectionError, ConnectionError)
    for name in ("LeaseTypeError", "LeaseValueError", "LeaseDatabaseError", "LeaseSchemaError"):
        assert issubclass(getattr(sql_lease, name), LeaseError)
    assert issubclass(sql_lease.LeaseClosedError, RuntimeError)
    assert issubclass(sql_lease.LeaseClosedError, LeaseError)
    assert not issubclass(sql_lease.LeaseClosedError, sql_lease.LeaseDatabaseError)
    assert issubclass(sql_lease.LeaseAlreadyHeld, sql_lease.LeaseNotAcquired)


class _Duck:
    async def acquire_lease(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        return AcquireResult(True, owner)

    async def get_lease_owner(self, key: str) -> str | None:
        return None

    async def release_lease(self, key: str, owner: str) -> None:
        return None

    async def renew_lease(self, key: str, owner: str, ttl_ms: int) -> bool:
        return True

    async def transfer_lease(self, key: str, a: str, b: str, ttl_ms: int) -> bool:
        return True


class _Partial:
    async def acquire_lease(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        return AcquireResult(True, owner)


class _NotCallable(_Duck):
    transfer_lease = None  # type: ignore[assignment]


def test_detection_is_structural() -> None:
    assert is_lease_provider(_Duck())
    assert is_lease_provider(InMemoryLeaseProvider())
    assert is_lease_provider(NOOP_LEASE_PROVIDER)
    assert not is_lease_provider(_Partial())
    assert not is_lease_provider(_NotCallable())
    assert not is_lease_provider(None)
    assert not is_lease_provider(object())
    assert isinstance(_Duck(), LeaseProvider)


def test_lease_provider_or_noop() -> None:
    duck = _Duck()
    assert lease_provider_or_noop(duck) is duck
    assert lease_provider_or_noop(_Partial()) is NOOP_LEASE_PROVIDER
    assert lease_provider_or_noop(None) is NOOP_LEASE_PROVIDER
    assert isinstance(NOOP_LEASE_PROVIDER, NoopLeaseProvider)


async def test_noop_provider_always_wins_and_is_inert() -> None:
    noop = NoopLeaseProvider()
    first = await noop.acquire_lease("k", "a", 1000)
    second = await noop.acquire_lease("k", "b", 1000)
    assert (first.acquired, first.owner) == (True, "a")
    assert (second.acquired, second.owner) == (True, "b")
    assert await noop.get_lease_owner("k") is None
    assert await noop.release_lease("k", "a") is None
    assert await noop.renew_lease("k", "zz", 1000) is True
    assert await noop.transfer_lease("k", "x", "y", 1000) is True


async def test_in_memory_provider_follows_an_injected_clock() -> None:
    now = [100.0]
    provider = InMemoryLeaseProvider(clock=lambda: now[0])
    held = await provider.acquire_lease("k", "a", 1000)
    now[0] += 0.999
    assert await provider.get_lease_owner("k") == "a"
    now[0] += 0.001  # expires_at <= now is expired
    assert await provider.get_lease_owner("k") is None
    taken = await provider.acquire_lease("k", "b", 1000)
    assert taken.fence is not None and held.fence is not None and taken.fence > held.fence
    now[0] += 5
    assert await provider.purge_expired() == 1


@pytest.mark.parametrize("name", ["bad name", "1leases", "lea-ses", 'x"y', "", "a" * 41, "ä"])
def test_bad_table_or_schema_names_are_rejected_at_construction(name: str) -> None:
    engine = create_async_engine("postgresql+asyncpg://u@127.0.0.1:1/db")
    with pytest.raises(ValueError, match="identifier"):
        SqlLeaseProvider(engine, table_name=name)
    with pytest.raises(ValueError, match="identifier"):
        SqlLeaseProvider(engine, schema=name)
    with pytest.raises(ValueError, match="identifier"):
        SqlLeaseProvider.from_url("postgresql://u@127.0.0.1:1/db", table_name=name)


def test_identifier_of_wrong_type_is_a_type_error() -> None:
    engine = create_async_engine("postgresql+asyncpg://u@127.0.0.1:1/db")
    with pytest.raises(TypeError):
        SqlLeaseProvider(engine, table_name=3)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf")])
def test_bad_timeouts_are_rejected(timeout: float) -> None:
    with pytest.raises(ValueError, match="timeout"):
        SqlLeaseProvider.from_url("postgresql://u@127.0.0.1:1/db", timeout=timeout)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:p@h/db",
        "postgres://u:p@h/db",
        "postgresql+asyncpg://u:p@h/db",
        "postgresql://u:p%40ss%25w0rd@h:5433/db?sslmode=require",
    ],
)
def test_user_urls_map_to_asyncpg(url: str) -> None:
    from sql_lease.backends._urls import normalize_url

    parsed = normalize_url(url)
    assert parsed.drivername == "postgresql+asyncpg"
    assert "sslmode" not in parsed.query
    if "%40" in url:
        assert parsed.password == "p@ss%w0rd"
        assert parsed.query["ssl"] == "require"


@pytest.mark.parametrize("url", ["mysql://u@h/db", "not a url", "postgresql+psycopg2://u@h/db"])
def test_unsupported_urls_are_rejected(url: str) -> None:
    with pytest.raises(ValueError, match="URL"):
        SqlLeaseProvider.from_url(url)


def test_repr_never_shows_the_password() -> None:
    provider = SqlLeaseProvider.from_url("postgresql://user:hunter2%21@127.0.0.1:1/db")
    assert "hunter2" not in repr(provider)
    assert "***" in repr(provider)


def test_statement_catalogue_quotes_identifiers_and_binds_values() -> None:
    from sql_lease.backends.postgres.catalogue import build_catalogue
    from sql_lease.sync._catalogue import statements_of

    sql = statements_of(build_catalogue("my_leases", "coord"))
    assert sql.table == '"coord"."my_leases"'
    sequence = '"coord"."my_leases_fence_seq"'
    assert f"pg_catalog.nextval('{sequence}'::pg_catalog.regclass)" in sql.acquire
    for text in (sql.acquire, sql.renew, sql.release, sql.transfer, sql.get_owner, sql.get_lease):
        assert "$1" in text
        assert "now()" not in text.lower().replace("clock_timestamp()", "")


def test_libpq_tls_parameters_reach_asyncpg_through_its_dsn() -> None:
    from sql_lease.backends._urls import normalize_url, redact

    url = normalize_url(
        "postgres://u:pw@db.example/app?sslmode=verify-full&sslrootcert=/etc/ca.pem"
        "&sslcert=/c.pem&sslkey=/k.pem&sslpassword=s3cret&application_name=x"
    )
    assert url.drivername == "postgresql+asyncpg"
    assert url.query["ssl"] == "verify-full"
    assert url.query["application_name"] == "x"  # a server setting: left as it is
    assert url.query["dsn"] == (
        "postgresql://?sslcert=%2Fc.pem&sslkey=%2Fk.pem&sslrootcert=%2Fetc%2Fca.pem"
        "&sslpassword=s3cret"
    )
    assert not {"sslmode", "sslrootcert", "sslcert", "sslkey", "sslpassword"} & set(url.query)
    assert normalize_url(url) == url  # idempotent
    shown = redact(url)
    assert "s3cret" not in shown and "pw" not in shown.split("@")[0]
    assert "sslrootcert=%2Fetc%2Fca.pem" in shown and "dsn=" not in shown


def test_the_cli_and_the_sync_sqlite_provider_need_no_psycopg(tmp_path: Path) -> None:
    """`scripts/demo` installs only the `cli` extra: nothing on its path may import psycopg."""
    code = (
        "import sys\n"
        "sys.modules['psycopg'] = None\n"  # an import of it now raises ImportError
        "sys.modules['psycopg_pool'] = None\n"
        "import sql_lease.cli._app, sql_lease.sync\n"
        "from sql_lease import migrate\n"
        f"url = 'sqlite:///{tmp_path / 'leases.db'}'\n"
        "migrate.upgrade(url)\n"
        "with sql_lease.sync.SqlLeaseProvider.from_url(url) as p:\n"
        "    assert p.acquire_lease('k', 'o', 1000).acquired\n"
        "    with p.hold('h', 'o', 1000):\n"
        "        pass\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
