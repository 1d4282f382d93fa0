"""Names of the event tables that revision 0003 adds beside a leases table (Mastra's PubSub).

They derive from the leases table's name, so each leases table (``--table``) has its own set,
migrated and versioned with it. The TypeScript package `@sql-lease/mastra` derives the same
names; its drift test checks the migrated database against what it expects.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .._core.validate import check_identifier

__all__ = ["EventNames", "event_names"]


@dataclass(frozen=True, slots=True)
class EventNames:
    """The event objects of one leases table."""

    events: str
    topics: str
    groups: str
    claims: str
    id_sequence: str
    stamp_function: str
    channel: str

    @property
    def tables(self) -> frozenset[str]:
        return frozenset({self.events, self.topics, self.groups, self.claims})


def event_names(table_name: str, schema: str | None = None) -> EventNames:
    """The event tables, sequence, trigger function and NOTIFY channel of ``table_name``."""
    check_identifier("table_name", table_name)
    if schema is not None:
        check_identifier("schema", schema)
    channel = (
        f"sql_lease_events:{schema}.{table_name}" if schema else f"sql_lease_events:{table_name}"
    )
    if len(channel) > 63:  # PostgreSQL truncates identifiers (channels too) at 63 bytes
        channel = "sql_lease_events:" + hashlib.sha1(channel.encode()).hexdigest()
    t = table_name
    return EventNames(
        events=f"{t}_events",
        topics=f"{t}_event_topics",
        groups=f"{t}_event_groups",
        claims=f"{t}_event_claims",
        id_sequence=f"{t}_events_id_seq",
        stamp_function=f"{t}_events_stamp",
        channel=channel,
    )
