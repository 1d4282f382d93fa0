"""A hostile database: a co-tenant's look-alikes first on the search path, and pooled server
connections left with another client's ``search_path`` and temporary ``leases`` table.

`hostile` (one per test module) builds, in a fresh migrated database:

- a runtime role (``app``: the table's DML and the sequence, nothing else) and a co-tenant role
  (``evil``) with CREATE on ``public`` and a schema of its own, ``evil``;
- look-alikes, owned by the co-tenant, of every function and operator the library's statements
  name (found mechanically in the statement texts, `library_texts`: every ``pg_catalog.<name>(``
  and ``OPERATOR(pg_catalog.<op>)``, and the unqualified ``name(`` and `` op `` of older texts),
  one per built-in overload over the types lease statements handle, plus the two that
  captured the unqualified statements before (``"*"(bigint, interval)``, ``nextval(text)``,
  also planted in ``public``). Each one counts its calls in a
  sequence (not rolled back with the statement) and returns a wrong value (``true``, 1, 1 ms,
  ``'evil'``);
- ``ALTER ROLE app IN DATABASE ... SET search_path = evil, pg_catalog, public``: the co-tenant's
  schema before the built-ins for every session of the runtime role;
- a PgBouncer in transaction pooling whose every server connection was left by a neighbour
  client (`Hostile.plant_sessions`) with a session ``SET search_path`` (the same) and a
  temporary table ``leases`` (and sequence ``leases_fence_seq``) holding a live lease of
  ``intruder`` on every key the tests use.

`Hostile.planted_calls` tells whether any look-alike ran; `Hostile.truth` reads the real table
as the superuser. Roles are per module (cluster-wide names with a random suffix) and dropped at
the end.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sql_lease import migrate
from sql_lease.backends.postgres import catalogue as pg_catalogue
from sql_lease.backends.postgres.catalogue import build_catalogue
from sql_lease.catalogue import WRITE_KINDS, Catalogue, Statement

from ..infra.pgbouncer import PgBouncer

#: The types the lease statements' functions and operators take and return: look-alikes are
#: planted for every built-in overload over these (not for those the drivers' own catalogue
#: queries use on ``oid`` and ``name``).
TYPES = (
    "bytea",
    "bigint",
    "integer",
    "timestamp with time zone",
    "interval",
    "double precision",
    "numeric",
    "text",
    "boolean",
    "regclass",
    "anyarray",
    "anyelement",
)
_WRONG = {
    "boolean": "true",
    "bigint": "1",
    "integer": "1",
    "numeric": "1",
    "double precision": "1",
    "interval": "INTERVAL '1 millisecond'",
    "timestamp with time zone": "'epoch'::pg_catalog.timestamptz",
    "text": "'evil'",
    "bytea": "pg_catalog.convert_to('evil', 'UTF8')",
}
#: The runtime role's search path: the co-tenant's schema before the built-ins.
PATH = "evil, pg_catalog, public"
#: The look-alikes' own calls are to the built-ins.
_PINNED = "SET search_path = pg_catalog, pg_temp"
#: What captured the unqualified statements before every name was qualified.
OLD_FORMS = (("*", "bigint", "interval", "interval"),)
KEYS = ("job", "job2", "hot", "k", "b0", "b1", "b2", "b3", "b4", "b5", "b6", "b7")


def library_texts() -> list[str]:
    """Every statement text the PostgreSQL provider sends (and pooler mode's functions run)."""
    try:
        cat = build_catalogue("leases", None, "public")
    except TypeError:  # a library from before the schema was resolved (the teeth run)
        cat = build_catalogue("leases", "public")
    texts = [s.sql for s in _statements(cat)] + [cat.renew_many(1).sql]
    texts += [t for t in [getattr(pg_catalogue, "HOME_SQL", None)] if t]
    assert cat.batches is not None
    count = len(WRITE_KINDS)
    for mask in range(1, 1 << count):
        texts.append(cat.batches.writes(tuple(k for k in range(count) if mask >> k & 1)).sql)
    texts.append(cat.batches.read.sql)
    return texts


def _statements(cat: Catalogue) -> list[Statement[Any]]:
    return [s for f in fields(cat) if isinstance(s := getattr(cat, f.name), Statement)]


def used_names(texts: list[str]) -> tuple[set[str], set[str]]:
    """The functions and operators the texts call, qualified (``pg_catalog.name(``,
    ``OPERATOR(pg_catalog.op)``) or not (``name(``, `` op ``): names that are no built-in
    function (aliases, keywords) match no overload and plant nothing."""
    functions = {m.lower() for t in texts for m in re.findall(r"\b(\w+)\(", t)}
    operators = {m for t in texts for m in re.findall(r"OPERATOR\(pg_catalog\.([^)]+)\)", t)}
    operators |= {m for t in texts for m in re.findall(r"\s([-=<>+*/|&!~]+)\s", t)}
    return functions, operators


@dataclass
class Hostile:
    """The hostile database (see the module docstring)."""

    admin: str  # superuser, direct (psycopg URL)
    direct: str  # the runtime role, direct (SQLAlchemy URL, asyncpg)
    pooled: str  # the runtime role through the PgBouncer
    app: str
    evil: str
    bouncer: PgBouncer
    planted: list[str] = field(default_factory=list)

    def sql(self, query: str, *args: object) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.admin, autocommit=True) as conn:
            cur = conn.execute(query.encode(), args or None)
            return cur.fetchall() if cur.description else []

    def planted_calls(self) -> int:
        """How many times a look-alike ran (a sequence: not undone by a rollback)."""
        [(value, called)] = self.sql("SELECT last_value, is_called FROM evil.hits")
        return int(value) if called else 0

    def mark(self) -> tuple[int, int]:
        """Where the look-alikes' counters stand (`check` compares with it)."""
        [(rows,)] = self.sql("SELECT count(*) FROM evil.ran")
        return self.planted_calls(), rows

    def check(self, mark: tuple[int, int]) -> list[str]:
        """Assert that no look-alike ran for a statement of the library since ``mark``: every
        call since is logged (none hidden by a rolled-back statement) and came from a driver's
        own catalogue queries, which name none of the library's objects. Returns those."""
        hits, rows = mark
        new = self.sql("SELECT name, query FROM evil.ran OFFSET %s", rows)
        assert self.planted_calls() - hits == len(new), (self.planted_calls(), hits, new)
        ours = [(n, q) for n, q in new if re.search(r"leases|sql_lease", q)]
        assert ours == [], ours
        return sorted({f"{n}: {q.split()[:3]}" for n, q in new})

    def ran(self) -> list[tuple[str, str]]:
        """The look-alikes that ran (those the statement that called them was not rolled
        back), with that statement."""
        return [(n, q) for n, q in self.sql("SELECT DISTINCT name, query FROM evil.ran")]

    def truth(self, key: str) -> tuple[str, int, datetime] | None:
        """The live lease of ``key`` in the real table, read by the superuser."""
        rows = self.sql(
            "SELECT convert_from(owner, 'UTF8'), fence, expires_at FROM public.leases"
            " WHERE key = convert_to(%s, 'UTF8') AND expires_at > clock_timestamp()",
            key,
        )
        return rows[0] if rows else None

    def clear(self) -> None:
        self.sql("TRUNCATE public.leases")

    def plant_sessions(self) -> None:
        """Leave every server connection of the pool with a neighbour's session state: each
        neighbour holds a transaction (so each gets its own server connection), sets the
        session's search path and creates the temporary shadows, and commits."""
        neighbours = [
            psycopg.connect(self.bouncer.dsn(self.database, self.app), prepare_threshold=None)
            for _ in range(self.bouncer.pool_size)
        ]
        try:
            for conn in neighbours:
                conn.execute(f"SET search_path = {PATH}".encode())
                conn.execute(b"CREATE TEMP TABLE IF NOT EXISTS leases (LIKE public.leases)")
                conn.execute(b"CREATE TEMP SEQUENCE IF NOT EXISTS leases_fence_seq")
                conn.execute(b"DELETE FROM pg_temp.leases")
                for key in KEYS:
                    conn.execute(
                        b"INSERT INTO pg_temp.leases (key, owner, fence, expires_at, acquired_at)"
                        b" VALUES (pg_catalog.convert_to(%s, 'UTF8'), 'intruder', 1,"
                        b" 'infinity', pg_catalog.now())",
                        (key,),
                    )
            for conn in neighbours:
                conn.commit()
        finally:
            for conn in neighbours:
                conn.close()

    def session_states(self) -> list[tuple[str, bool]]:
        """(search_path, has a temporary ``leases``) of every server connection of the pool."""
        clients = [
            psycopg.connect(self.bouncer.dsn(self.database, self.app), prepare_threshold=None)
            for _ in range(self.bouncer.pool_size)
        ]
        try:
            found = []
            for conn in clients:
                [(path, shadow)] = conn.execute(
                    b"SELECT pg_catalog.current_setting('search_path'),"
                    b" pg_catalog.to_regclass('pg_temp.leases') IS NOT NULL"
                ).fetchall()
                found.append((path, shadow))
            for conn in clients:
                conn.rollback()
            return found
        finally:
            for conn in clients:
                conn.close()

    @property
    def database(self) -> str:
        return make_url(self.direct).database or ""


class _Bouncer(PgBouncer):
    """A PgBouncer that also lets ``users`` in (trust, as for ``postgres``)."""

    def __init__(self, users: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.users = users

    def _write_config(self) -> None:
        super()._write_config()
        userlist = self.base / "userlist.txt"
        lines = "".join(f'"{u}" ""\n' for u in self.users)
        userlist.write_text(userlist.read_text(encoding="utf-8") + lines, encoding="utf-8")


def _function_overloads(conn: psycopg.Connection[Any], names: set[str]) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid),"
        " p.prorettype::regtype::text, p.proretset FROM pg_catalog.pg_proc p"
        " WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.proname = ANY(%s)"
        " AND p.prokind = 'f' AND p.provariadic = 0"
        " AND (p.prorettype::regtype::text = ANY(%s) OR p.prorettype = 'void'::regtype)"
        " AND NOT EXISTS (SELECT FROM unnest(p.proargtypes::oid[]) t"
        "                 WHERE NOT t::regtype::text = ANY(%s))",
        (sorted(names), list(TYPES), list(TYPES)),
    ).fetchall()


def _operator_overloads(conn: psycopg.Connection[Any], names: set[str]) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT o.oprname, o.oprleft::regtype::text, o.oprright::regtype::text,"
        " o.oprresult::regtype::text FROM pg_catalog.pg_operator o"
        " WHERE o.oprnamespace = 'pg_catalog'::regnamespace AND o.oprname = ANY(%s)"
        " AND o.oprleft <> 0 AND o.oprleft::regtype::text = ANY(%s)"
        " AND o.oprright::regtype::text = ANY(%s) AND o.oprresult::regtype::text = ANY(%s)",
        (sorted(names), list(TYPES), list(TYPES), list(TYPES)),
    ).fetchall()


def _body(label: str, result: str, setof: bool) -> str:
    wrong = "" if setof or result == "void" else _WRONG.get(result, "NULL")
    label = label.replace("'", "''")
    return (
        "BEGIN PERFORM pg_catalog.nextval('evil.hits'::pg_catalog.regclass);"
        f" INSERT INTO evil.ran VALUES ('{label}', pg_catalog.current_query());"
        f" RETURN {wrong}; END"
    )


def plant(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    """Plant the look-alikes in ``schema`` (as the connection's role); their signatures."""
    functions, operators = used_names(library_texts())
    functions |= {"nextval"}
    planted = []
    for name, arguments, result, setof in _function_overloads(conn, functions):
        label = f"{schema}.{name}({arguments})"
        returns = f"SETOF {result}" if setof else result
        conn.execute(
            f'CREATE FUNCTION {schema}."{name}"({arguments}) RETURNS {returns}'
            f" LANGUAGE plpgsql {_PINNED} AS $b${_body(label, result, setof)}$b$".encode()
        )
        planted.append(label)
    overloads = _operator_overloads(conn, operators) + list(OLD_FORMS)
    for n, (op, left, right, result) in enumerate(overloads):
        label = f"{schema}.{op}({left}, {right})"
        fn = f"{schema}.op_{n}"
        conn.execute(
            f"CREATE FUNCTION {fn}({left}, {right}) RETURNS {result} LANGUAGE plpgsql"
            f" {_PINNED} AS $b${_body(label, result, False)}$b$".encode()
        )
        conn.execute(
            f"CREATE OPERATOR {schema}.{op} (LEFTARG = {left}, RIGHTARG = {right},"
            f" FUNCTION = {fn})".encode()
        )
        planted.append(label)
    return planted


@pytest.fixture(scope="module")
def hostile(make_database: Any) -> Iterator[Hostile]:
    url = make_database()
    migrate.upgrade(url)
    suffix = uuid.uuid4().hex[:8]
    app, evil = f"sl_app_{suffix}", f"sl_evil_{suffix}"
    parsed = make_url(url)
    db = parsed.database
    admin = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{app}" LOGIN'.encode())
        conn.execute(f'CREATE ROLE "{evil}" LOGIN'.encode())
        conn.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON public.leases TO "{app}"'.encode())
        conn.execute(f'GRANT USAGE ON SEQUENCE public.leases_fence_seq TO "{app}"'.encode())
        conn.execute(f'GRANT SELECT ON public.leases_alembic_version TO "{app}"'.encode())
        # The co-tenant: CREATE on public (as every role had before PostgreSQL 15) and on its
        # own schema, which it opens to everyone.
        conn.execute(f'GRANT CREATE ON SCHEMA public TO "{evil}"'.encode())
        conn.execute(f'CREATE SCHEMA evil AUTHORIZATION "{evil}"'.encode())
        conn.execute(f'SET ROLE "{evil}"'.encode())
        conn.execute(b"GRANT USAGE ON SCHEMA evil TO PUBLIC")
        conn.execute(b"CREATE SEQUENCE evil.hits")
        conn.execute(b"GRANT USAGE, UPDATE ON SEQUENCE evil.hits TO PUBLIC")
        conn.execute(b"CREATE TABLE evil.ran (name text, query text)")
        conn.execute(b"GRANT INSERT ON evil.ran TO PUBLIC")
        planted = plant(conn, "evil")
        # The two takeovers of the unqualified statements, in public too (first after the
        # built-ins on a default search path).
        for fn in (
            "public.nextval(text) RETURNS bigint",
            'public."*"(bigint, interval) RETURNS interval',
        ):
            label = fn.split(" RETURNS")[0]
            result = fn.split("RETURNS ")[1]
            conn.execute(
                f"CREATE FUNCTION {fn} LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp"
                f" AS $b${_body(label, result, False)}$b$".encode()
            )
            planted.append(label)
        conn.execute(b"RESET ROLE")
        conn.execute(f'ALTER ROLE "{app}" IN DATABASE "{db}" SET search_path = {PATH}'.encode())
    bouncer = _Bouncer([app], pool_mode="transaction", pool_size=2)
    bouncer.start()
    direct = parsed.set(username=app).render_as_string(hide_password=False)
    env = Hostile(
        admin=admin,
        direct=direct,
        pooled=bouncer.url(db or "postgres", app),
        app=app,
        evil=evil,
        bouncer=bouncer,
        planted=planted,
    )
    try:
        yield env
    finally:
        bouncer.stop()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                b"SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                b" WHERE datname = %s AND pid <> pg_backend_pid()",
                (db,),
            )
            for role in (app, evil):
                conn.execute(f'DROP OWNED BY "{role}" CASCADE'.encode())
            conn.execute(f'ALTER ROLE "{app}" IN DATABASE "{db}" RESET ALL'.encode())
            conn.execute(f'REVOKE CREATE ON SCHEMA public FROM "{evil}"'.encode())
            for role in (app, evil):
                conn.execute(f'DROP ROLE "{role}"'.encode())
