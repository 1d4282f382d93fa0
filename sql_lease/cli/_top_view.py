"""What ``sql-lease top`` shows, built from snapshots of the lease table: pure, no I/O.

A snapshot is the `LeaseState` rows `SqlExtensions.list_states` read (live leases, leases that
ended within the window, keys a waiter wants), all with the database's ``now``. `Changes`
keeps the recent changes: from the first snapshot alone what its timestamps say (acquired
within the window, ended within it), then what differs from one snapshot to the next (a key
taken, handed to another owner, released or expired, wanted). Every time shown is the
database's, so the view never mixes clocks. `view_fields` is the JSON document, `view` the
rich renderable; with a class function (``--classes``) keys are shown as their class only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..catalogue import LeaseState
from ._format import escape, format_duration, format_time

__all__ = ["Change", "Changes", "by_class", "view", "view_fields"]

Name = Callable[[str], str]


@dataclass(frozen=True, slots=True)
class Change:
    """Something that happened to ``key`` at ``at`` (database time)."""

    at: datetime
    key: str
    what: str  #: "acquired", "handed over", "released", "expired", "wanted"
    owner: str
    fence: int


class Changes:
    """The last ``keep`` changes, newest first, from successive snapshots."""

    def __init__(self, keep: int = 10) -> None:
        self.recent: deque[Change] = deque(maxlen=keep)
        self._last: dict[tuple[str, str], LeaseState] | None = None

    def update(self, states: Sequence[LeaseState], window: timedelta) -> None:
        # By key and owner: a counting lease shows one state per holder of its key.
        current = {(s.key, s.owner): s for s in states}
        found = (
            _from_timestamps(states, window)
            if self._last is None
            else _differences(self._last, current)
        )
        for change in sorted(found, key=lambda c: c.at):
            self.recent.appendleft(change)
        self._last = current


def _from_timestamps(states: Sequence[LeaseState], window: timedelta) -> list[Change]:
    out = []
    for s in states:
        if s.now - s.acquired_at <= window:
            out.append(Change(s.acquired_at, s.key, "acquired", s.owner, s.fence))
        if not s.live:
            out.append(Change(s.expires_at, s.key, "ended", s.owner, s.fence))
    return out


def _differences(
    before: dict[tuple[str, str], LeaseState], after: dict[tuple[str, str], LeaseState]
) -> list[Change]:
    # A holder live before and gone now, on a key that gained a live holder: handed over.
    gone = {key for (key, owner), old in before.items() if old.live and (key, owner) not in after}
    handed: set[str] = set()
    out = []
    for (key, owner), s in after.items():
        old = before.get((key, owner))
        if s.live and (old is None or not old.live or old.fence != s.fence):
            if old is None and key in gone:
                handed.add(key)
                out.append(Change(s.acquired_at, key, "handed over", owner, s.fence))
            else:
                out.append(Change(s.acquired_at, key, "acquired", owner, s.fence))
        elif old is not None and old.live and not s.live:
            # A release sets the expiry to the moment it happened; an expiry keeps it.
            what = "released" if s.expires_at < old.expires_at else "expired"
            out.append(Change(s.expires_at, key, what, owner, s.fence))
        if s.wanted and (old is None or not old.wanted):
            out.append(Change(s.now, key, "wanted", owner, s.fence))
    for (key, owner), old in before.items():
        if (key, owner) not in after and old.live and key not in handed:
            out.append(Change(old.now, key, "ended", owner, old.fence))  # past the window
    return out


def by_class(separator: str) -> Name:
    """A key's class: what comes before ``separator`` (the whole key when it has none)."""
    return lambda key: key.split(separator, 1)[0]


def _ms(delta: timedelta) -> int:
    return round(delta.total_seconds() * 1000)


def _lease_fields(s: LeaseState) -> dict[str, Any]:
    return {
        "key": s.key,
        "owner": s.owner,
        "fence": s.fence,
        "live": s.live,
        "expires_at": s.expires_at.isoformat(),
        "expires_in_ms": _ms(s.expires_at - s.now),
        "acquired_at": s.acquired_at.isoformat(),
        "held_for_ms": _ms(min(s.now, s.expires_at) - s.acquired_at),
        "wanted": s.wanted,
        "wanted_until": None if s.wanted_until is None else s.wanted_until.isoformat(),
    }


@dataclass(slots=True)
class _Class:
    name: str
    held: int = 0
    wanted: int = 0
    ended: int = 0
    longest_ms: int = 0


def _classes(states: Sequence[LeaseState], name: Name) -> list[_Class]:
    found: dict[str, _Class] = {}
    for s in states:
        group = found.setdefault(name(s.key), _Class(name(s.key)))
        if s.live:
            group.held += 1
            group.longest_ms = max(group.longest_ms, _ms(s.now - s.acquired_at))
        else:
            group.ended += 1
        group.wanted += s.wanted
    return sorted(found.values(), key=lambda c: c.name)


def view_fields(
    states: Sequence[LeaseState], changes: Changes, now: datetime, classes: Name | None
) -> dict[str, Any]:
    """The JSON document of one view (exact strings; a foreign name is its label)."""
    data: dict[str, Any] = {"now": now.isoformat()}
    if classes is None:
        data["leases"] = [_lease_fields(s) for s in states]
    else:
        data["classes"] = [
            {
                "class": c.name,
                "held": c.held,
                "wanted": c.wanted,
                "ended": c.ended,
                "longest_held_ms": c.longest_ms,
            }
            for c in _classes(states, classes)
        ]
    name = classes or (lambda key: key)
    data["changes"] = [
        {
            "at": c.at.isoformat(),
            ("class" if classes else "key"): name(c.key),
            "change": c.what,
            "owner": c.owner,
            "fence": c.fence,
        }
        for c in changes.recent
    ]
    return data


def view(
    states: Sequence[LeaseState],
    changes: Changes,
    now: datetime,
    classes: Name | None,
    header: str,
    problem: str | None = None,
) -> Group:
    """One screen: a header, the leases (or their classes), the recent changes."""
    live = sum(s.live for s in states)
    wanted = sum(s.wanted for s in states)
    title = Text(f"{header}  {format_time(now)}  {live} live, {wanted} wanted")
    parts: list[Any] = [title]
    if problem is not None:
        parts.append(Text(f"! {problem} (showing the last view; retrying)", style="bold red"))
    parts.append(_leases_table(states) if classes is None else _classes_table(states, classes))
    parts.append(Text("recent changes", style="bold"))
    parts.append(_changes_table(changes, now, classes))
    return Group(*parts)


def _leases_table(states: Sequence[LeaseState]) -> Table:
    table = Table("key", "owner", "fence", "ttl left", "held for", "waiters", box=None)
    for s in states:
        if s.live:
            ttl = format_duration(_ms(s.expires_at - s.now))
            held = format_duration(_ms(s.now - s.acquired_at))
        else:
            ttl = f"ended {format_duration(_ms(s.now - s.expires_at))} ago"
            held = format_duration(_ms(s.expires_at - s.acquired_at))
        waiters = "-"
        if s.wanted and s.wanted_until is not None:
            waiters = f"wanted {format_duration(_ms(s.wanted_until - s.now))}"
        style = None if s.live else "dim"
        table.add_row(
            Text(escape(s.key)),
            Text(escape(s.owner)),
            str(s.fence),
            ttl,
            held,
            waiters,
            style=style,
        )
    if not states:
        table.add_row("(no live, recent or wanted leases)", "", "", "", "", "")
    return table


def _classes_table(states: Sequence[LeaseState], name: Name) -> Table:
    table = Table("class", "held", "wanted", "ended", "longest held", box=None)
    for c in _classes(states, name):
        longest = format_duration(c.longest_ms) if c.held else "-"
        table.add_row(Text(escape(c.name)), str(c.held), str(c.wanted), str(c.ended), longest)
    if not states:
        table.add_row("(no live, recent or wanted leases)", "", "", "", "")
    return table


def _changes_table(changes: Changes, now: datetime, classes: Name | None) -> Table:
    table = Table("when", "class" if classes else "key", "change", "owner", "fence", box=None)
    name = classes or (lambda key: key)
    for c in changes.recent:
        ago = format_duration(max(0, _ms(now - c.at)))
        table.add_row(
            f"{ago} ago", Text(escape(name(c.key))), c.what, Text(escape(c.owner)), str(c.fence)
        )
    if not changes.recent:
        table.add_row("(none yet)", "", "", "", "")
    return table
