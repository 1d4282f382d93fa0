"""``sql-lease --pooler`` through a real PgBouncer in transaction mode, and host lists.

A deploy pipeline with only the pooler's URL migrates, checks readiness and runs the lease
commands through it; the libpq host list form works for every command.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy.engine import make_url

from sql_lease import migrate

from ..infra.pgbouncer import PgBouncer
from .conftest import Cli

pytestmark = [pytest.mark.infra, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def bouncer() -> Iterator[PgBouncer]:
    """Transaction pooling with 2 server connections, the pooler's defaults otherwise."""
    with PgBouncer(pool_mode="transaction", pool_size=2) as b:
        yield b


def via(bouncer: PgBouncer, database_url: str) -> str:
    return bouncer.url(make_url(database_url).database or "postgres")


def host_list(url: str) -> str:
    """``url`` with a dead host first: libpq's multi-host form, read-write wanted."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = int(s.getsockname()[1])
    u = make_url(url)
    return (
        f"postgresql://{u.username}@127.0.0.1:{dead},{u.host}:{u.port}/{u.database}"
        "?target_session_attrs=read-write"
    )


def test_migrate_check_and_lease_commands_through_a_transaction_pooler(
    sql_lease: Cli, bouncer: PgBouncer, make_database: Callable[[], str]
) -> None:
    url = via(bouncer, make_database())
    refused = sql_lease("migrate", "--url", url, "--timeout", "20s")
    assert refused.code == 3 and "unsupported startup parameter" in refused.err  # the control
    pooled = ("--url", url, "--pooler", "transaction", "--timeout", "20s")
    assert sql_lease("check", *pooled).code == 4
    done = sql_lease("migrate", *pooled)
    assert done.code == 0
    assert done.out.startswith(f"leases schema at {migrate.head()} (head) in ")
    ready = sql_lease("check", *pooled, "--json")
    assert ready.code == 0, ready.err
    assert json.loads(ready.out)["at_head"] is True
    got = sql_lease("acquire", "k", "me", "--ttl", "30s", *pooled, "--json")
    assert got.code == 0, got.err
    assert json.loads(got.out)["acquired"] is True
    shown = sql_lease("get", "k", *pooled, "--json")
    assert shown.code == 0 and json.loads(shown.out)["owner"] == "me"
    # The environment variable does the same as the option.
    env = {"SQL_LEASE_POOLER": "transaction"}
    assert sql_lease("release", "k", "me", "--url", url, env=env).code == 0
    assert sql_lease("downgrade", "--yes", "--url", url, env=env).code == 0
    gone = sql_lease("current", "--url", url, "--json", env=env)
    assert gone.code == 0 and json.loads(gone.out)["current"] is None


def test_pooler_needs_a_url_and_a_valid_mode(sql_lease: Cli, bouncer: PgBouncer) -> None:
    embedded = sql_lease("check", "--pooler", "transaction")
    assert embedded.code == 2 and "--pooler needs a PostgreSQL --url" in embedded.err
    bad = sql_lease("check", "--url", bouncer.url(), "--pooler", "statement")
    assert bad.code == 2 and "statement" in bad.err
    run = sql_lease(
        "run",
        "--exclusive",
        "job",
        "--at-most",
        "1m",
        "--pooler",
        "session",
        "--url",
        bouncer.url(),
        "--",
        "true",
    )
    assert run.code == 2 and "does not support --pooler" in run.err


def test_host_lists_work_for_migrations_and_lease_commands(
    cli: Cli, bouncer: PgBouncer, make_database: Callable[[], str]
) -> None:
    database = make_database()
    listed = host_list(database)
    done = cli("migrate", "--url", listed)
    assert done.code == 0, done.err
    assert cli("check", "--url", listed).code == 0
    got = cli("acquire", "k", "me", "--url", listed, "--json")
    assert got.code == 0 and json.loads(got.out)["acquired"] is True
    # Through the pooler: a dead host first, then PgBouncer.
    pooled = host_list(via(bouncer, database))
    shown = cli("get", "k", "--url", pooled, "--pooler", "transaction", "--json")
    assert shown.code == 0, shown.err
    assert json.loads(shown.out)["owner"] == "me"
    assert cli("check", "--url", pooled, "--pooler", "transaction").code == 0
