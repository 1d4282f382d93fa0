"""Event tables for Mastra's PubSub (@sql-lease/mastra): events, topics, consumer groups, claims.

PostgreSQL only: on SQLite this revision changes nothing (the TypeScript PubSub needs
LISTEN/NOTIFY). For a leases table ``t``:

- ``t_events``: one row per published event; ``id`` from ``t_events_id_seq`` (global order,
  the delivery cursor), ``seq`` the event's index within its topic (0, 1, 2, ...: Mastra's
  offsets), ``payload`` the event as JSON text (``json``, not ``jsonb``: Mastra's thread keys
  contain NUL, which ``jsonb`` refuses), ``created_at`` by the database clock.
- ``t_event_topics``: per topic the next ``seq`` and the last publish time. Its row lock,
  taken by the insert trigger, serialises the publishers of one topic, so events of a topic
  commit in ``id`` order and a reader that has seen ``id`` N never misses a smaller one.
- ``t_event_groups``: per consumer group and topic, the next event ``id`` to hand out.
- ``t_event_claims``: events handed to a group member and not yet acknowledged; one whose
  ``visible_at`` passed goes to another member (at-least-once).
- A ``BEFORE INSERT`` trigger stamps ``seq``, ``id`` and ``created_at`` and sends
  ``pg_notify(<channel>, topic)`` on commit, which wakes the subscribers.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

import hashlib
from collections.abc import Sequence
from typing import NamedTuple

import sqlalchemy as sa
from alembic import op

from sql_lease.migrate import migration_names

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


class _Names(NamedTuple):
    events: str
    topics: str
    groups: str
    claims: str
    id_sequence: str
    stamp_function: str
    channel: str


def event_names(table_name: str, schema: str | None) -> _Names:
    """The event objects of a leases table, as this revision names them (frozen here: the same
    rule as `sql_lease._migrating.event_names`, which must never change what a shipped revision
    made)."""
    channel = (
        f"sql_lease_events:{schema}.{table_name}" if schema else f"sql_lease_events:{table_name}"
    )
    if len(channel) > 63:  # PostgreSQL truncates identifiers (channels too) at 63 bytes
        channel = "sql_lease_events:" + hashlib.sha1(channel.encode()).hexdigest()
    t = table_name
    return _Names(
        f"{t}_events",
        f"{t}_event_topics",
        f"{t}_event_groups",
        f"{t}_event_claims",
        f"{t}_events_id_seq",
        f"{t}_events_stamp",
        channel,
    )


def _postgres() -> bool:
    return op.get_context().dialect.name == "postgresql"


def _ddl(statement: str) -> None:
    # DDL, not text(): the channel name contains ':' which text() would read as a bind.
    op.execute(sa.DDL(statement))


def upgrade() -> None:
    if not _postgres():
        return
    names = migration_names()
    ev = event_names(names.table, names.schema)
    q = names.qualified
    _ddl(f"CREATE SEQUENCE {q(ev.id_sequence)} AS bigint CACHE 1")
    _ddl(
        f"CREATE TABLE {q(ev.topics)} ("
        " topic text NOT NULL,"
        " next_seq bigint NOT NULL DEFAULT 0,"
        " last_at timestamptz NOT NULL DEFAULT clock_timestamp(),"
        f' CONSTRAINT "{ev.topics}_pkey" PRIMARY KEY (topic))'
    )
    _ddl(
        f"CREATE TABLE {q(ev.events)} ("
        " id bigint NOT NULL,"
        " topic text NOT NULL,"
        " seq bigint NOT NULL,"
        " payload json NOT NULL,"
        " created_at timestamptz NOT NULL DEFAULT clock_timestamp(),"
        f' CONSTRAINT "{ev.events}_pkey" PRIMARY KEY (id),'
        f' CONSTRAINT "{ev.events}_topic_seq" UNIQUE (topic, seq),'
        f' CONSTRAINT "{ev.events}_topic_len" CHECK (octet_length(topic) BETWEEN 1 AND 1024))'
    )
    _ddl(f'CREATE INDEX "{ev.events}_topic_id" ON {q(ev.events)} (topic, id)')
    _ddl(f'CREATE INDEX "{ev.events}_created_at" ON {q(ev.events)} (created_at)')
    _ddl(
        f"CREATE TABLE {q(ev.groups)} ("
        " group_name text NOT NULL,"
        " topic text NOT NULL,"
        " next_id bigint NOT NULL,"
        " created_at timestamptz NOT NULL DEFAULT clock_timestamp(),"
        f' CONSTRAINT "{ev.groups}_pkey" PRIMARY KEY (group_name, topic))'
    )
    _ddl(
        f"CREATE TABLE {q(ev.claims)} ("
        " group_name text NOT NULL,"
        " topic text NOT NULL,"
        " event_id bigint NOT NULL,"
        " consumer text NOT NULL,"
        " visible_at timestamptz NOT NULL,"
        " attempts integer NOT NULL DEFAULT 1,"
        f' CONSTRAINT "{ev.claims}_pkey" PRIMARY KEY (group_name, topic, event_id))'
    )
    _ddl(f'CREATE INDEX "{ev.claims}_due" ON {q(ev.claims)} (group_name, topic, visible_at)')
    _ddl(f'CREATE INDEX "{ev.claims}_event" ON {q(ev.claims)} (event_id)')
    sequence_literal = q(ev.id_sequence).replace("'", "''")
    _ddl(
        f"CREATE FUNCTION {q(ev.stamp_function)}() RETURNS trigger LANGUAGE plpgsql AS $body$\n"
        "BEGIN\n"
        f"  INSERT INTO {q(ev.topics)} AS tp (topic, next_seq, last_at)\n"
        "  VALUES (NEW.topic, 1, clock_timestamp())\n"
        "  ON CONFLICT (topic) DO UPDATE\n"
        "  SET next_seq = tp.next_seq + 1, last_at = clock_timestamp()\n"
        "  RETURNING tp.next_seq - 1 INTO NEW.seq;\n"
        "  -- After the topic's row lock: ids of one topic are handed out in commit order.\n"
        f"  NEW.id := nextval('{sequence_literal}'::regclass);\n"
        "  NEW.created_at := clock_timestamp();\n"
        f"  PERFORM pg_notify('{ev.channel}', NEW.topic);\n"
        "  RETURN NEW;\n"
        "END\n"
        "$body$"
    )
    _ddl(
        f'CREATE TRIGGER "{ev.stamp_function}" BEFORE INSERT ON {q(ev.events)}'
        f" FOR EACH ROW EXECUTE FUNCTION {q(ev.stamp_function)}()"
    )


def downgrade() -> None:
    if not _postgres():
        return
    names = migration_names()
    ev = event_names(names.table, names.schema)
    q = names.qualified
    for table in (ev.claims, ev.groups, ev.events, ev.topics):
        _ddl(f"DROP TABLE {q(table)}")  # the trigger goes with its table
    _ddl(f"DROP FUNCTION {q(ev.stamp_function)}()")
    _ddl(f"DROP SEQUENCE {q(ev.id_sequence)}")
