"""Revisions 0005 and 0006: the server functions of pooler mode, and their drift against the
catalogue.

At head (0006) each function's body must run exactly the statement text the library would send
plain, every object named in full (the migration carries frozen copies; a changed statement
needs a revision that replaces its function, and this test is what says so). Shown for the
default table and for a custom table in its own schema: the bodies, ``SECURITY INVOKER``, the
pinned ``search_path = pg_catalog, pg_temp``, ``EXECUTE`` for any role, the rows a call
returns; a downgrade to 0005 that restores 0005's functions and 0004's trigger exactly, to 0004
that removes them all (and an upgrade again).
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from sql_lease import migrate
from sql_lease.backends.postgres.catalogue import build_catalogue
from sql_lease.backends.postgres.functions import routines

pytestmark = pytest.mark.timeout(120)

CASES = [("leases", None), ("jobs_lease", "mig5_schema")]


def _plain(url: str) -> str:
    return url.replace("+asyncpg", "")


def _functions(url: str, table: str) -> dict[str, tuple[str, bool, list[str] | None, str]]:
    """name -> (body, security definer, config, schema) of the functions named ``table_*``."""
    with psycopg.connect(_plain(url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT p.proname, p.prosrc, p.prosecdef, p.proconfig, n.nspname FROM pg_proc p"
            " JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE p.proname LIKE %s AND p.prolang = (SELECT oid FROM pg_language"
            " WHERE lanname = 'plpgsql') AND p.prorettype <> 'trigger'::regtype",
            (table.replace("_", r"\_") + r"\_%",),
        ).fetchall()
    return {name: (body, definer, config, nsp) for name, body, definer, config, nsp in rows}


@pytest.mark.parametrize(("table", "schema"), CASES)
def test_each_function_runs_the_catalogue_statement(
    make_database: Callable[[], str], table: str, schema: str | None
) -> None:
    url = make_database()
    if schema is not None:
        with psycopg.connect(_plain(url), autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"'.encode())
    migrate.upgrade(url, "0005", table_name=table, schema=schema)
    at_0005 = _functions(url, table)
    triggers_0005 = _trigger_functions(url)
    migrate.upgrade(url, table_name=table, schema=schema)
    found = _functions(url, table)
    home = schema or "public"
    expected = routines(build_catalogue(table, schema, None if schema else home), table)
    assert sorted(found) == sorted(r.name for r in expected)
    for routine in expected:
        body, definer, config, nsp = found[routine.name]
        assert body == (
            f"\n#variable_conflict use_column\nBEGIN\nRETURN QUERY {routine.statement};\nEND\n"
        ), routine.name
        assert not definer  # SECURITY INVOKER: the caller's own privileges
        assert config == ["search_path=pg_catalog, pg_temp"]
        assert nsp == home
        assert at_0005[routine.name][2] == [f"search_path={home}, pg_temp"]  # 0005's
    triggers = _trigger_functions(url)
    assert sorted(triggers) == sorted(triggers_0005)
    for name, (body, config) in triggers.items():
        assert config == ["search_path=pg_catalog, pg_temp"], name
        assert f'"{home}".' in body and "pg_catalog.nextval(" in body, name
        assert " + " not in body and "clock_timestamp()" not in body.replace(
            "pg_catalog.clock_timestamp()", ""
        ), name
    with psycopg.connect(_plain(url), autocommit=True) as conn:
        for routine in expected:
            signature = routine.signature(schema)
            [(public,)] = conn.execute(
                "SELECT bool_or(a.grantee = 0 AND a.privilege_type = 'EXECUTE')"
                " FROM pg_proc p, aclexplode(p.proacl) a WHERE p.oid = %s::regprocedure",
                (signature,),
            ).fetchall()
            assert public, signature
        where = "" if schema is None else f'"{schema}".'
        acquired = conn.execute(
            f"SELECT acquired, fence, holder FROM {where}\"{table}_acquire\"('k', 'me', 60000)"
        ).fetchall()
        assert [(a, h) for a, _, h in acquired] == [(True, None)]
        assert acquired[0][1] >= 1 << 40  # the timeline fence of 0004's trigger
        refused = conn.execute(
            f"SELECT acquired, fence, holder FROM {where}\"{table}_acquire\"('k', 'you', 60000)"
        ).fetchall()
        assert refused == [(False, acquired[0][1], b"me")]
        owner = conn.execute(f"SELECT owner FROM {where}\"{table}_get_owner\"('k')").fetchall()
        assert owner == [(b"me",)]

    migrate.downgrade(url, "0005", table_name=table, schema=schema)
    assert _functions(url, table) == at_0005
    assert _trigger_functions(url) == triggers_0005
    migrate.downgrade(url, "0004", table_name=table, schema=schema)
    assert _functions(url, table) == {}
    migrate.upgrade(url, table_name=table, schema=schema)
    assert len(_functions(url, table)) == len(expected)


def test_the_sql_script_computes_the_schema_on_the_server() -> None:
    script = migrate.upgrade(None, sql=True)
    assert script is not None
    assert script.count("CREATE FUNCTION %I.%I(") == len(
        routines(build_catalogue("leases"), "leases")
    )  # 0005
    assert "'\"leases\"'::regclass" in script
    assert (
        script.count("CREATE OR REPLACE FUNCTION @home@.")
        == len(routines(build_catalogue("leases"), "leases")) + 1
    )
    assert "pg_catalog.current_schemas(false)" in script  # 0006 finds the home on the server


def _trigger_functions(url: str) -> dict[str, tuple[str, list[str] | None]]:
    """name -> (body, config) of the trigger functions (0003's stamp, 0004's fence)."""
    with psycopg.connect(_plain(url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT p.proname, p.prosrc, p.proconfig FROM pg_proc p"
            " WHERE p.prorettype = 'trigger'::regtype AND p.proname LIKE '%stamp'"
            " OR p.proname LIKE '%fence_timeline'"
        ).fetchall()
    return {name: (body, config) for name, body, config in rows}
