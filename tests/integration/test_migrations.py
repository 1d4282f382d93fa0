"""Migrations: own version table, offline SQL, downgrade to nothing, no drift from the model."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import MetaData, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from sql_lease import LeaseError, LeaseTypeError, SqlLeaseProvider, lease_table, migrate
from sql_lease.backends._urls import normalize_url

ROOT = Path(__file__).resolve().parents[2]


def objects(url: str) -> set[str]:
    """Every table and sequence in the database outside the system schemas."""
    u = make_url(url)
    with psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database) as conn:
        rows = conn.execute(
            "SELECT n.nspname || '.' || c.relname FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE c.relkind IN ('r', 'S', 'v', 'p')"
            " AND n.nspname NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
    return {r[0] for r in rows}


def sql(url: str, statement: str) -> list[tuple[object, ...]]:
    u = make_url(url)
    with psycopg.connect(
        host=u.host, port=u.port, user=u.username, dbname=u.database, autocommit=True
    ) as conn:
        cur = conn.execute(statement)
        return cur.fetchall() if cur.description else []


def alembic(*args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != migrate.ENV_URL}
    if url is not None:
        env[migrate.ENV_URL] = url
    return subprocess.run(
        [sys.executable, "-m", "alembic", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_upgrade_uses_its_own_version_table_and_leaves_the_apps_alone(
    make_database: Callable[[], str],
) -> None:
    url = make_database()
    sql(url, "CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY)")
    sql(url, "INSERT INTO alembic_version VALUES ('app_rev_42')")
    migrate.upgrade(url)
    assert sql(url, "SELECT version_num FROM alembic_version") == [("app_rev_42",)]
    assert sql(url, "SELECT version_num FROM leases_alembic_version") == [(migrate.head(),)]
    assert migrate.current(url) == migrate.head()
    assert migrate.check(url) is True
    migrate.upgrade(url)  # idempotent
    migrate.downgrade(url)
    assert objects(url) == {"public.alembic_version"}
    assert sql(url, "SELECT version_num FROM alembic_version") == [("app_rev_42",)]


def test_check_reports_a_database_that_is_behind(make_database: Callable[[], str]) -> None:
    url = make_database()
    assert migrate.current(url) is None
    assert migrate.check(url) is False


def test_alembic_cli_from_a_deploy_pipeline_with_the_url_in_the_environment(
    make_database: Callable[[], str],
) -> None:
    url = make_database()
    # A percent-encoded password must survive (trust auth ignores its value).
    u = make_url(url)
    with_password = f"postgresql://{u.username}:p%40ss%25word@{u.host}:{u.port}/{u.database}"
    done = alembic("upgrade", "head", url=with_password)
    assert done.returncode == 0, done.stderr
    assert "p@ss" not in done.stderr + done.stdout
    current = alembic("current", url=with_password)
    assert migrate.head() in current.stdout
    assert {"public.leases", "public.leases_fence_seq", "public.leases_alembic_version"} <= objects(
        url
    )
    done = alembic("downgrade", "base", url=with_password)
    assert done.returncode == 0, done.stderr
    assert objects(url) == set()


def test_alembic_cli_without_a_url_says_what_to_set() -> None:
    done = alembic("upgrade", "head")
    assert done.returncode != 0
    assert migrate.ENV_URL in done.stderr


def test_offline_sql_needs_no_database() -> None:
    done = alembic("upgrade", "head", "--sql")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "CREATE TABLE leases_alembic_version" in out
    assert "CREATE SEQUENCE leases_fence_seq" in out
    assert "CREATE TABLE leases (" in out
    assert "fillfactor" in out
    assert "alembic_version (" not in out.replace("leases_alembic_version (", "")
    assert migrate.upgrade(None, sql=True) is not None


def test_offline_downgrade_sql_drops_everything() -> None:
    out = migrate.downgrade(None, f"{migrate.head()}:base", sql=True)
    assert out is not None
    assert "DROP TABLE leases;" in out
    assert "DROP SEQUENCE leases_fence_seq" in out
    assert 'DROP TABLE IF EXISTS "leases_alembic_version"' in out


async def test_custom_table_and_schema(make_database: Callable[[], str]) -> None:
    url = make_database()
    await migrate.upgrade_async(url, table_name="coord_leases", schema="coord")
    assert {
        "coord.coord_leases",
        "coord.coord_leases_fence_seq",
        "coord.coord_leases_alembic_version",
    } <= objects(url)
    provider = SqlLeaseProvider.from_url(url, table_name="coord_leases", schema="coord")
    try:
        assert (await provider.acquire_lease("k", "a", 10_000)).acquired
        assert await provider.get_lease_owner("k") == "a"
    finally:
        await provider.aclose()
    assert await migrate.current_async(url, table_name="coord_leases", schema="coord") == (
        migrate.head()
    )
    await migrate.downgrade_async(url, table_name="coord_leases", schema="coord")
    assert not {o for o in objects(url) if o.startswith("coord.")}


def _drift(url: str, table: str, schema: str | None) -> list[object]:
    metadata = MetaData()
    lease_table(metadata, table, schema)

    def include(obj: object, name: str | None, type_: str, *_: object) -> bool:
        return type_ != "table" or name == table

    def compare(conn: object) -> list[object]:
        ctx = MigrationContext.configure(
            conn,  # type: ignore[arg-type]
            opts={
                "include_object": include,
                "include_schemas": schema is not None,
                "compare_type": True,
                "compare_server_default": True,
            },
        )
        return list(compare_metadata(ctx, metadata))

    async def run() -> list[object]:
        engine = create_async_engine(normalize_url(url))
        try:
            async with engine.connect() as conn:
                return await conn.run_sync(compare)
        finally:
            await engine.dispose()

    return asyncio.run(run())


@pytest.mark.parametrize(("table", "schema"), [("leases", None), ("other_leases", "coord")])
def test_migrations_and_table_definition_never_drift(
    make_database: Callable[[], str], table: str, schema: str | None
) -> None:
    url = make_database()
    migrate.upgrade(url, table_name=table, schema=schema)
    assert _drift(url, table, schema) == []
    # And the drift check can fail: a column the model lacks shows up.
    target = f'"{schema}"."{table}"' if schema else f'"{table}"'
    sql(url, f"ALTER TABLE {target} ADD COLUMN extra int")
    assert _drift(url, table, schema) != []


def test_the_wheel_ships_the_migrations(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("sql_lease-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        zf.extractall(tmp_path / "site")
    assert "sql_lease/_migrations/env.py" in names
    assert "sql_lease/_migrations/versions/0001_create_leases.py" in names
    assert "sql_lease/py.typed" in names
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "from sql_lease import migrate; print(migrate.script_location());"
            "print(migrate.upgrade(None, sql=True))",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert probe.returncode == 0, probe.stderr
    assert str(tmp_path / "site" / "sql_lease" / "_migrations") in probe.stdout
    assert "CREATE TABLE leases (" in probe.stdout


def test_sqlite_migrations_apply_check_drift_and_remove_everything(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'leases.db'}"
    assert migrate.check(url) is False
    migrate.upgrade(url)
    assert migrate.check(url) is True
    assert _drift(url, "leases", None) == []

    async def names() -> set[str]:
        engine = create_async_engine(normalize_url(url))
        try:
            async with engine.connect() as conn:
                rows = await conn.exec_driver_sql(
                    "SELECT type || ':' || name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
                )
                return {r[0] for r in rows}
        finally:
            await engine.dispose()

    assert {
        "table:leases",
        "table:leases_fence_seq",
        "table:leases_alembic_version",
        "trigger:leases_fence_ins",
        "trigger:leases_fence_upd",
    } <= asyncio.run(names())
    migrate.downgrade(url)
    assert asyncio.run(names()) == set()


def test_sqlite_offline_sql_has_the_counter_and_triggers() -> None:
    out = migrate.upgrade("sqlite:///unused.db", sql=True)
    assert out is not None
    assert 'CREATE TABLE "leases_fence_seq"' in out
    assert 'CREATE TRIGGER "leases_fence_ins"' in out
    assert "CREATE SEQUENCE" not in out


def test_alembic_cli_logs_what_it_runs(tmp_path: Path) -> None:
    done = alembic("upgrade", "head", url=f"sqlite:///{tmp_path / 'leases.db'}")
    assert done.returncode == 0, done.stderr
    assert "INFO  [alembic.runtime.migration] Running upgrade  -> 0001" in done.stderr
    assert "Running upgrade 0001 -> 0002" in done.stderr


def test_alembic_cli_errors_are_one_line_without_a_traceback(tmp_path: Path) -> None:
    missing = alembic("upgrade", "head")
    assert missing.returncode != 0
    assert "Traceback" not in missing.stderr + missing.stdout
    assert missing.stdout.strip().splitlines() == [
        f"FAILED: no database URL: set {migrate.ENV_URL} (or pass -x url=...) to run migrations"
    ]
    refused = alembic("upgrade", "head", url="postgresql://u:s3cret@127.0.0.1:1/db")
    assert refused.returncode != 0
    assert "Traceback" not in refused.stderr + refused.stdout
    (line,) = refused.stdout.strip().splitlines()
    assert line.startswith("FAILED: upgrade: ") and "s3cret" not in refused.stderr + line


async def test_the_sync_forms_inside_an_event_loop_point_to_the_async_ones(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'leases.db'}"
    for name in ("upgrade", "downgrade", "current", "check"):
        with pytest.raises(LeaseError) as info:
            getattr(migrate, name)(url)
        assert f"use `await migrate.{name}_async(...)`" in str(info.value)
    assert not (tmp_path / "leases.db").exists()


async def test_a_sync_engine_is_refused_by_name(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'leases.db'}")
    try:
        with pytest.raises(LeaseTypeError) as info:
            await migrate.upgrade_async(engine)  # type: ignore[arg-type]
    finally:
        engine.dispose()
    assert "synchronous Engine" in str(info.value)
    assert "not a valid database URL" not in str(info.value)
    with pytest.raises(LeaseTypeError):
        await migrate.check_async(42)  # type: ignore[arg-type]


def test_reading_the_revision_of_a_missing_sqlite_file_does_not_create_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'missing.db'}"
    assert migrate.current(url) is None
    assert migrate.check(url) is False
    migrate.downgrade(url)  # nothing to downgrade
    assert list(tmp_path.iterdir()) == []


def _upgrade_in_a_process(url: str) -> str:
    try:
        migrate.upgrade(url)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


def test_sqlite_migrators_starting_together_run_one_after_the_other(tmp_path: Path) -> None:
    """A read of the version table then DDL, in one transaction: BEGIN IMMEDIATE serialises."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(4, mp_context=ctx) as pool:
        pool.submit(str).result()  # the pool's processes are up before the first round
        for n in range(3):
            url = f"sqlite:///{tmp_path / f'r{n}.db'}"
            outcomes = list(pool.map(_upgrade_in_a_process, [url] * 4))
            assert outcomes == ["ok"] * 4
            assert migrate.check(url)
