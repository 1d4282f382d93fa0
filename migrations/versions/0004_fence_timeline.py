"""Fences carry the server's timeline, so that they never go backwards after a failover.

PostgreSQL only (on SQLite this revision changes nothing). A promoted standby resumes the fence
sequence from the last value the WAL it received had logged (sequences log 32 values ahead), so
after an asynchronous failover it can hand out fences below, or equal to, fences the old
primary had already acknowledged. Every promotion starts a new timeline, and the timeline only
grows; so a trigger rewrites each newly drawn fence ``f`` in the database:

    fence = (GREATEST(timeline, f >> 40) << 40) | (f & (2^40 - 1))

that is, ``timeline << 40 | sequence value`` while the sequence is below ``2^40`` (10^12 grants
per timeline; 23 bits of timeline). The timeline is the first 8 hex digits of
``pg_walfile_name(pg_current_wal_lsn())``: executable by every role (the least-privilege
runtime role included), right from the first write after a promotion (``pg_control_*`` lags
until the next checkpoint). ``GREATEST`` keeps a sequence that was set above the timeline's
range (by the downgrade below, or by hand after a restore into a new cluster, see the README)
in charge, so that the rewritten fence is never below the value the sequence drew.

Two ``BEFORE`` row triggers share one function: on ``INSERT``, and on ``UPDATE OF fence`` when
the new fence differs from the old (``WHEN``), so renewals and releases (which do not set the
fence) and same-owner re-acquires and transfers (which keep it) fire nothing. One exception: a
same-owner re-acquire (or transfer to itself) of a fence drawn on an *earlier* timeline gets a
new fence (and ``acquired_at``). The row survived a failover, but the old primary may have
acknowledged a release and other owners' grants after it, with higher fences, that the standby
never received; keeping the old fence would hand its owner a fence below them. Being
``BEFORE`` triggers, ``RETURNING fence`` reports the rewritten value: every caller (the Python
providers, the TypeScript client, SQL) sees one fence.
The statements are unchanged, so library versions from before this revision also draw
timeline fences during a rolling upgrade. Fences already in the table are plain sequence values
(below ``2^40``) and every new fence is at least ``1 << 40``: ordered across the upgrade.

Downgrade drops the triggers and the function, and sets the sequence to the highest fence this
database can have handed out: the larger of ``max(fence)`` in the table and the rewrite of the
sequence's last value on the current timeline (rows may have been purged). Plain sequence
values then stay above every timeline fence (order kept; only the failover protection goes).
Setting it to ``max(fence & (2^40 - 1))`` instead would hand out fences below the ones issued.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sql_lease.migrate import MigrationNames, migration_names

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SEQUENCE_BITS = 40
MASK = (1 << SEQUENCE_BITS) - 1
# The current timeline as a bigint (raises during recovery: only a primary writes).
TIMELINE = (
    "('x' || substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))"
    "::bit(32)::bigint"
)


def _postgres() -> bool:
    return op.get_context().dialect.name == "postgresql"


def _ddl(statement: str) -> None:
    op.execute(sa.DDL(statement))


def _qualified(names: MigrationNames, name: str) -> str:
    # Derived from a validated table name (plain identifier characters), so quoting is enough;
    # may be longer than the 40 characters allowed for the table name itself.
    return f'"{name}"' if names.schema is None else f'"{names.schema}"."{name}"'


def _timeline_fence(value: str, timeline: str = TIMELINE) -> str:
    """SQL for ``value`` (a drawn fence) with its top bits raised to at least the timeline."""
    bits = SEQUENCE_BITS
    return f"(GREATEST({timeline}, {value} >> {bits}) << {bits}) | ({value} & {MASK})"


def upgrade() -> None:
    if not _postgres():
        return
    names = migration_names()
    table = _qualified(names, names.table)
    sequence = _qualified(names, names.sequence).replace("'", "''")
    function = _qualified(names, f"{names.table}_fence_timeline")
    _ddl(
        f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $body$\n"
        "DECLARE\n"
        f"  timeline bigint := {TIMELINE};\n"
        "BEGIN\n"
        "  IF TG_OP = 'UPDATE' AND NEW.fence = OLD.fence THEN\n"
        "    -- A tenure kept from an earlier timeline: grants the failover lost may have drawn\n"
        "    -- higher fences after it, so it starts anew above them.\n"
        f"    NEW.fence := nextval('{sequence}'::regclass);\n"
        "    NEW.acquired_at := clock_timestamp();\n"
        "  END IF;\n"
        f"  NEW.fence := {_timeline_fence('NEW.fence', 'timeline')};\n"
        "  RETURN NEW;\n"
        "END\n"
        "$body$"
    )
    _ddl(
        f'CREATE TRIGGER "{names.table}_fence_timeline_insert" BEFORE INSERT ON {table}'
        f" FOR EACH ROW EXECUTE FUNCTION {function}()"
    )
    _ddl(
        f'CREATE TRIGGER "{names.table}_fence_timeline_update" BEFORE UPDATE OF fence ON {table}'
        " FOR EACH ROW WHEN (NEW.fence IS DISTINCT FROM OLD.fence"
        f" OR (OLD.fence >> {SEQUENCE_BITS}) BETWEEN 1 AND ({TIMELINE}) - 1)"
        f" EXECUTE FUNCTION {function}()"
    )


def downgrade() -> None:
    if not _postgres():
        return
    names = migration_names()
    table = _qualified(names, names.table)
    sequence = _qualified(names, names.sequence)
    _ddl(f'DROP TRIGGER "{names.table}_fence_timeline_update" ON {table}')
    _ddl(f'DROP TRIGGER "{names.table}_fence_timeline_insert" ON {table}')
    _ddl(f"DROP FUNCTION {_qualified(names, f'{names.table}_fence_timeline')}()")
    literal = sequence.replace("'", "''")
    # setval(s, v): the next nextval returns v + 1, above every fence handed out so far.
    _ddl(
        f"SELECT setval('{literal}'::regclass, GREATEST("
        f"(SELECT max(fence) FROM {table}),"
        f" (SELECT {_timeline_fence('last_value')} FROM {sequence})))"
    )
