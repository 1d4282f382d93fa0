"""Managed-service roles: migrations and the runtime as non-superusers, with no extensions.

What a managed PostgreSQL gives an application (RDS, Cloud SQL, Azure, Supabase): no
superuser, no CREATE on the database, a schema of its own. The migrations run as the role that
owns that schema, and the application as a role with only the grants the README lists; nothing
needs an extension. Both work through a transaction pooler too.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sql_lease import SqlLeaseProvider, migrate

from ..infra.pgbouncer import PgBouncer

LONG = 30_000
SCHEMA = "coord"


def admin(url: str) -> psycopg.Connection[tuple[object, ...]]:
    u = make_url(url)
    return psycopg.connect(
        host=u.host, port=u.port, user=u.username, dbname=u.database, autocommit=True
    )


@dataclass(frozen=True)
class Roles:
    database_url: str  #: as the superuser (the test's own checks)
    owner_url: str  #: the schema owner: runs the migrations
    runtime_url: str  #: the application: only the README's grants


@pytest.fixture
def roles(make_database: Callable[[], str]) -> Iterator[Roles]:
    url = make_database()
    tag = uuid.uuid4().hex[:8]
    owner, runtime = f"lease_owner_{tag}", f"lease_app_{tag}"
    db = make_url(url).database
    with admin(url) as conn:
        for role in (owner, runtime):
            conn.execute(
                f'CREATE ROLE "{role}" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT'.encode()
            )
        conn.execute(f'REVOKE ALL ON DATABASE "{db}" FROM PUBLIC'.encode())
        conn.execute(b"REVOKE ALL ON SCHEMA public FROM PUBLIC")
        conn.execute(f'GRANT CONNECT ON DATABASE "{db}" TO "{owner}", "{runtime}"'.encode())
        conn.execute(f'CREATE SCHEMA "{SCHEMA}" AUTHORIZATION "{owner}"'.encode())
    u = make_url(url)
    try:
        yield Roles(
            url,
            u.set(username=owner).render_as_string(hide_password=False),
            u.set(username=runtime).render_as_string(hide_password=False),
        )
    finally:
        with admin(url) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = ANY(%s)",
                ([owner, runtime],),
            )
            conn.execute(f'DROP SCHEMA "{SCHEMA}" CASCADE'.encode())
            for role in (runtime, owner):
                conn.execute(f'DROP OWNED BY "{role}"'.encode())
                conn.execute(f'DROP ROLE "{role}"'.encode())


def grant_runtime(roles: Roles) -> None:
    """The README's grants, run by the schema owner (who may grant on what it owns)."""
    runtime = make_url(roles.runtime_url).username
    with admin(roles.owner_url) as conn:
        conn.execute(f'GRANT USAGE ON SCHEMA "{SCHEMA}" TO "{runtime}"'.encode())
        conn.execute(
            f'GRANT SELECT, INSERT, UPDATE, DELETE ON "{SCHEMA}".leases TO "{runtime}"'.encode()
        )
        conn.execute(f'GRANT USAGE ON SEQUENCE "{SCHEMA}".leases_fence_seq TO "{runtime}"'.encode())
        conn.execute(f'GRANT SELECT ON "{SCHEMA}".leases_alembic_version TO "{runtime}"'.encode())


async def run_contract(url: str, **options: object) -> None:
    """Every contract operation, the extensions a deployment uses, hold and wait_for_lease."""
    k = "tenant\0job"
    async with SqlLeaseProvider.from_url(url, schema=SCHEMA, timeout=10, **options) as p:  # type: ignore[arg-type]
        got = await p.acquire_lease(k, "a", LONG)
        assert got.acquired and got.fence is not None
        assert not (await p.acquire_lease(k, "b", LONG)).acquired
        assert await p.get_lease_owner(k) == "a"
        assert await p.renew_lease(k, "a", LONG)
        assert await p.transfer_lease(k, "a", "b", LONG)
        lease = await p.get_lease(k)
        assert lease is not None and lease.owner == "b" and lease.fence > got.fence
        await p.release_lease(k, "b")
        assert await p.get_lease_owner(k) is None
        assert [le.key for le in await p.list_leases("tenant\0")] == []
        async with p.hold("held", "me", LONG) as held:
            assert held.fence is not None
        waited = await p.wait_for_lease("held", "other", LONG, timeout_ms=LONG)
        assert waited.acquired
        await p.release_lease("held", "other")


async def test_migrations_and_runtime_as_non_superusers_with_no_extensions(roles: Roles) -> None:
    await migrate.upgrade_async(roles.owner_url, schema=SCHEMA)
    assert await migrate.check_async(roles.owner_url, schema=SCHEMA)
    grant_runtime(roles)
    assert await migrate.check_async(roles.runtime_url, schema=SCHEMA)  # the readiness probe
    await run_contract(roles.runtime_url)
    with admin(roles.database_url) as conn:
        extensions = [name for (name,) in conn.execute("SELECT extname FROM pg_extension")]
        owners = conn.execute(
            "SELECT DISTINCT pg_get_userbyid(relowner) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s",
            (SCHEMA,),
        ).fetchall()
    assert extensions == ["plpgsql"]  # what every database has: nothing was installed
    assert owners == [(make_url(roles.owner_url).username,)]
    # The owner can take everything down again; the runtime role could not have.
    await migrate.downgrade_async(roles.owner_url, schema=SCHEMA)
    assert await migrate.current_async(roles.owner_url, schema=SCHEMA) is None


@pytest.mark.infra
async def test_the_same_roles_through_a_transaction_pooler(roles: Roles) -> None:
    with PgBouncer(pool_mode="transaction", pool_size=2) as bouncer:
        db = make_url(roles.database_url).database or "postgres"
        owner_name = make_url(roles.owner_url).username or ""
        runtime_name = make_url(roles.runtime_url).username or ""
        # Trust authentication still wants every user in the pooler's auth_file.
        with (bouncer.base / "userlist.txt").open("a", encoding="utf-8") as users:
            users.write(f'"{owner_name}" ""\n"{runtime_name}" ""\n')
        bouncer.admin("RELOAD")
        owner = bouncer.url(db, owner_name)
        runtime = bouncer.url(db, runtime_name)
        await migrate.upgrade_async(owner, schema=SCHEMA, pooler="transaction")
        grant_runtime(roles)
        assert await migrate.check_async(runtime, schema=SCHEMA, pooler="transaction")
        await run_contract(runtime, pooler="transaction", listen_url=roles.runtime_url)
