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

from .._core.contract import ForeignLease, Lease
from ._format import escape, format_duration, format_time

__all__ = [
    "console",
    "describe_lease",
    "emit_json",
    "lease_fields",
    "lease_table",
    "millis_between",
    "note",
    "page_after",
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
    """A lease as JSON fields; strings are exact (JSON escapes NUL as \\u0000). A row that
    another tool wrote with a key or owner that is not UTF-8 (`ForeignLease`) has
    ``"foreign": true``, ``key_hex`` and ``owner_hex``, and null for the name that is not
    UTF-8 (its label names another key)."""
    fields: dict[str, Any] = {
        "key": lease.key,
        "owner": lease.owner,
        "fence": lease.fence,
        "expires_at": lease.expires_at.isoformat(),
        "acquired_at": lease.acquired_at.isoformat(),
        "expires_in_ms": millis_between(lease.expires_at, now),
    }
    if lease.metadata is not None:  # str as is; bytes as {"hex": ...}
        data = lease.metadata
        fields["metadata"] = data if isinstance(data, str) else {"hex": data.hex()}
    if isinstance(lease, ForeignLease):
        fields["foreign"] = True
        fields["key_hex"] = lease.key_bytes.hex()
        fields["owner_hex"] = lease.owner_bytes.hex()
        if not _utf8(lease.key_bytes):
            fields["key"] = None
        if not _utf8(lease.owner_bytes):
            fields["owner"] = None
    return fields


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return False
    return True


def page_after(lease: Lease) -> str | None:
    """The ``--after`` value that pages past ``lease``: its key; for a key that is not UTF-8,
    its longest UTF-8 prefix (the next page starts with that row again), None if empty."""
    if not isinstance(lease, ForeignLease):
        return lease.key
    try:
        return lease.key_bytes.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        return lease.key_bytes[: exc.start].decode("utf-8", "surrogatepass") or None


def _cells(lease: Lease) -> tuple[str, str]:
    """A table's key and owner: escaped; a foreign row's hex label marked as such."""
    if not isinstance(lease, ForeignLease):
        return escape(lease.key), escape(lease.owner)
    key = escape(lease.key) if _utf8(lease.key_bytes) else f"{lease.key} (not UTF-8)"
    owner = escape(lease.owner) if _utf8(lease.owner_bytes) else f"{lease.owner} (not UTF-8)"
    return key, owner


def describe_lease(lease: Lease, now: datetime) -> str:
    """One line: who holds it, its fence and time left."""
    left = format_duration(millis_between(lease.expires_at, now))
    data = "" if lease.metadata is None else f", metadata {_metadata(lease.metadata)}"
    return (
        f"{escape(lease.key)} is held by {escape(lease.owner)} "
        f"(fence {lease.fence}, expires in {left}, acquired {format_time(lease.acquired_at)}"
        f"{data})"
    )


def _metadata(data: bytes | str) -> str:
    """Metadata for people: a str escaped, bytes as ``\\x`` and hex."""
    return escape(data) if isinstance(data, str) else "\\x" + data.hex()


def lease_table(leases: Sequence[Lease], now: datetime) -> None:
    """Live leases as a table on stdout; keys and owners escaped."""
    columns = ["key", "owner", "fence", "expires in", "acquired at"]
    with_data = any(lease.metadata is not None for lease in leases)
    table = Table(*columns, *(["metadata"] if with_data else []), box=None, pad_edge=False)
    for lease in leases:
        key, owner = _cells(lease)
        data = [] if not with_data or lease.metadata is None else [Text(_metadata(lease.metadata))]
        table.add_row(
            Text(key),
            Text(owner),
            str(lease.fence),
            format_duration(millis_between(lease.expires_at, now)),
            format_time(lease.acquired_at),
            *data,
        )
    console().print(table)
