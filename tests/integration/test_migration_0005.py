"""Revision 0005: the server functions of pooler mode, and their drift against the catalogue.

Each function's body must run exactly the statement text the library would send plain (the
migration carries frozen copies; a changed statement needs a revision that replaces its
function, and this test is what says so). Shown for the default table and for a custom table in
its own schema: the bodies, ``SECURITY INVOKER``, the pinned ``search_path``, ``EXECUTE`` for
any role, the rows a call returns, and a downgrade that removes them all (and an upgrade again).
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from sql_lease import migrate
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
    migrate.upgrade(url, table_name=table, schema=schema)
    found = _functions(url, table)
    expected = routines(table, schema)
    assert sorted(found) == sorted(r.name for r in expected)
    home = schema or "public"
    for routine in expected:
        body, definer, config, nsp = found[routine.name]
        assert body == (
            f"\n#variable_conflict use_column\nBEGIN\nRETURN QUERY {routine.statement};\nEND\n"
        ), routine.name
        assert not definer  # SECURITY INVOKER: the caller's own privileges
        assert config == [f"search_path={home}, pg_temp"]
        assert nsp == home
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

    migrate.downgrade(url, "0004", table_name=table, schema=schema)
    assert _functions(url, table) == {}
    migrate.upgrade(url, table_name=table, schema=schema)
    assert len(_functions(url, table)) == len(expected)


def test_the_sql_script_computes_the_schema_on_the_server() -> None:
    script = migrate.upgrade(None, sql=True)
    assert script is not None
    assert script.count("CREATE FUNCTION %I.%I(") == len(routines("leases"))
    assert "'\"leases\"'::regclass" in script
