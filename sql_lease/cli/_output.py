"""Writing results: a line or a rich table for people, one JSON document with ``--json``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .._contract import Lease
from ._format import escape, format_duration, format_time

__all__ = [
    "console",
    "describe_lease",
    "emit_json",
    "lease_fields",
    "lease_table",
    "millis_between",
    "note",
    "say",
]


def console(*, stderr: bool = False) -> Console:
    """A rich console that never interprets markup in our data; wide when not a terminal."""
    out = Console(stderr=stderr, highlight=False, markup=False, emoji=False)
    if not out.is_terminal:
        out = Console(stderr=stderr, highlight=False, markup=False, emoji=False, width=200)
    return out


def say(text: str) -> None:
    click.echo(text)


def note(text: str) -> None:
    """A remark on stderr (which database is used, ...), kept out of the results on stdout."""
    click.echo(f"sql-lease: {text}", err=True)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2))


def millis_between(later: datetime, earlier: datetime) -> int:
    return round((later - earlier).total_seconds() * 1000)


def lease_fields(lease: Lease, now: datetime) -> dict[str, Any]:
    """A lease as JSON fields; strings are exact (JSON escapes NUL as \\u0000)."""
    return {
        "key": lease.key,
        "owner": lease.owner,
        "fence": lease.fence,
        "expires_at": lease.expires_at.isoformat(),
        "acquired_at": lease.acquired_at.isoformat(),
        "expires_in_ms": millis_between(lease.expires_at, now),
    }


def describe_lease(lease: Lease, now: datetime) -> str:
    """One line: who holds it, its fence and time left."""
    left = format_duration(millis_between(lease.expires_at, now))
    return (
        f"{escape(lease.key)} is held by {escape(lease.owner)} "
        f"(fence {lease.fence}, expires in {left}, acquired {format_time(lease.acquired_at)})"
    )


def lease_table(leases: Sequence[Lease], now: datetime) -> None:
    """Live leases as a table on stdout; keys and owners escaped."""
    table = Table("key", "owner", "fence", "expires in", "acquired at", box=None, pad_edge=False)
    for lease in leases:
        table.add_row(
            Text(escape(lease.key)),
            Text(escape(lease.owner)),
            str(lease.fence),
            format_duration(millis_between(lease.expires_at, now)),
            format_time(lease.acquired_at),
        )
    console().print(table)
