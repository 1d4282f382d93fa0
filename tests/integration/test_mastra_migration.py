"""Revision 0003: the event tables of @sql-lease/mastra's PubSub (PostgreSQL only).

Upgrade creates them beside each leases table, downgrade to 0002 removes exactly them, the
insert trigger numbers each topic's events and announces them on the channel the TypeScript
package listens to, SQLite is left alone, and an application's Alembic hook ignores them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg
from sqlalchemy.engine import make_url

from sql_lease import migrate
from sql_lease._migrating.app_alembic import lease_table_names
from sql_lease._migrating.event_names import event_names


def _connect(url: str) -> psycopg.Connection[tuple[object, ...]]:
    u = make_url(url)
    return psycopg.connect(
        host=u.host, port=u.port, user=u.username, dbname=u.database, autocommit=True
    )


def _objects(url: str, schema: str = "public") -> set[str]:
    """Relations and functions of ``schema`` as ``kind:name``."""
    with _connect(url) as conn:
        rels = conn.execute(
            "SELECT c.relkind::text || ':' || c.relname FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s"
            " AND c.relkind IN ('r', 'S', 'i')",
            (schema,),
        ).fetchall()
        funcs = conn.execute(
            "SELECT 'f:' || p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = %s",
            (schema,),
        ).fetchall()
    return {str(r[0]) for r in rels + funcs}


def test_upgrade_adds_the_event_tables_and_downgrade_to_0002_removes_only_them(
    make_database: Callable[[], str],
) -> None:
    url = make_database()
    migrate.upgrade(url, "0002")
    before = _objects(url)
    migrate.upgrade(url)
    added = _objects(url) - before
    ev = event_names("leases")
    assert {f"r:{t}" for t in ev.tables} | {
        f"S:{ev.id_sequence}",
        f"f:{ev.stamp_function}",
    } <= added
    assert {
        "i:leases_events_topic_id",
        "i:leases_events_created_at",
        "i:leases_event_claims_due",
        "i:leases_event_claims_event",
    } <= added
    assert migrate.current(url) == migrate.head()
    migrate.downgrade(url, "0002")
    assert _objects(url) == before
    migrate.upgrade(url)
    migrate.downgrade(url)  # to base: nothing of ours is left
    assert _objects(url) == set()


def test_the_trigger_numbers_topics_and_notifies_the_package_channel(
    make_database: Callable[[], str],
) -> None:
    url = make_database()
    migrate.upgrade(url, table_name="jobs", schema="tenant_a")
    ev = event_names("jobs", "tenant_a")
    heard: list[str] = []
    listening = threading.Event()

    def listen() -> None:
        with _connect(url) as conn:
            conn.execute(f'LISTEN "{ev.channel}"')
            listening.set()
            for note in conn.notifies(timeout=30, stop_after=3):
                heard.append(note.payload)

    listener = threading.Thread(target=listen)
    listener.start()
    assert listening.wait(30)
    with _connect(url) as conn:
        for topic in ("a", "b", "a"):
            conn.execute(
                f'INSERT INTO "tenant_a"."{ev.events}" (topic, payload) VALUES (%s, %s)',
                (topic, '{"data": "thread\\u0000key"}'),
            )
        rows = conn.execute(
            f'SELECT topic, seq, id FROM "tenant_a"."{ev.events}" ORDER BY id'
        ).fetchall()
        counters = conn.execute(
            f'SELECT topic, next_seq FROM "tenant_a"."{ev.topics}" ORDER BY topic'
        ).fetchall()
    listener.join(30)
    assert [(t, s) for t, s, _ in rows] == [("a", 0), ("b", 0), ("a", 1)]
    assert [r[2] for r in rows] == sorted(r[2] for r in rows)
    assert counters == [("a", 2), ("b", 1)]
    assert heard == ["a", "b", "a"]


def test_offline_sql_has_the_trigger_and_sqlite_gets_nothing(tmp_path: object) -> None:
    out = migrate.upgrade(None, sql=True)
    assert out is not None
    assert 'CREATE TABLE "leases_events"' in out
    assert "pg_notify('sql_lease_events:leases', NEW.topic)" in out
    lite = migrate.upgrade("sqlite:///unused.db", sql=True)
    assert lite is not None
    assert "leases_events" not in lite


def test_sqlite_upgrade_and_downgrade_through_0003(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/leases.db"
    migrate.upgrade(url, "0003")
    assert migrate.current(url) == "0003"
    migrate.upgrade(url)
    migrate.downgrade(url, "0002")
    assert migrate.current(url) == "0002"


def test_an_applications_alembic_hook_ignores_the_event_tables() -> None:
    assert event_names("leases").tables <= lease_table_names("leases")
    assert "jobs_event_claims" in lease_table_names("jobs")
