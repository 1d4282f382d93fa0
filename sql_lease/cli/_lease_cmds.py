"""Commands on leases: list, get, acquire, renew, release, transfer, force-release, purge.

Exit 0 when the operation did what was asked, 1 when the lease was not acquired, the caller
was not the owner, ``get`` found no live lease or nothing was released. ``list`` and ``purge``
answer with exit 0 even when they find nothing: an empty answer is still an answer.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from datetime import datetime
from typing import Any

import click

from .._core.contract import Lease
from .._sqlprovider.provider import SqlLeaseProvider
from ._errors import ExitCode
from ._format import escape, format_duration, format_time
from ._options import Settings, database_options, to_age, to_name, to_prefix, to_ttl
from ._output import (
    describe_lease,
    emit_json,
    lease_fields,
    lease_table,
    millis_between,
    note,
    page_after,
    say,
)
from ._session import with_provider

__all__ = ["COMMANDS"]

_TTL = click.option(
    "--ttl",
    default="15s",
    show_default=True,
    callback=to_ttl,
    metavar="DURATION",
    help="Time to live: 500ms, 15s, 2m...",
)


def _key(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.argument("key", callback=to_name)(fn)


def _holder(lease: Lease | None, now: datetime) -> str:
    return "no live lease" if lease is None else describe_lease(lease, now)


@click.command("list")
@click.option(
    "--prefix",
    default=None,
    callback=to_prefix,
    help="Only keys starting with this (escapes read; empty: every key).",
)
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 10_000))
@click.option(
    "--after",
    default=None,
    callback=to_name,
    metavar="KEY",
    help="Only keys after this one (the last key of the previous page; escapes read).",
)
@database_options
def list_cmd(settings: Settings, prefix: str | None, limit: int, after: str | None) -> int:
    """Live leases in key order: key, owner, fence and time left (exit 0, also when none).

    A full page ends with the --after value of the next one (--json: "next_after", null on
    the last page).
    """

    async def body(p: SqlLeaseProvider) -> tuple[list[Lease], datetime]:
        return await p.list_leases(prefix, limit=limit, after=after), await p.now()

    leases, now = with_provider(settings, body)
    next_after = page_after(leases[-1]) if len(leases) == limit else None
    if settings.as_json:
        emit_json(
            {"leases": [lease_fields(lease, now) for lease in leases], "next_after": next_after}
        )
    elif not leases:
        say("no live leases")
    else:
        lease_table(leases, now)
        if next_after is not None:
            note(f"showing {limit}; next page: --after {shlex.quote(escape(next_after))}")
    return ExitCode.OK


@click.command("get")
@_key
@database_options
def get_cmd(settings: Settings, key: str) -> int:
    """Show the live lease of KEY (exit 1 when there is none)."""

    async def body(p: SqlLeaseProvider) -> tuple[Lease | None, datetime]:
        return await p.get_lease(key), await p.now()

    lease, now = with_provider(settings, body)
    if settings.as_json:
        emit_json(None if lease is None else lease_fields(lease, now))
    else:
        say(f"no live lease on {escape(key)}" if lease is None else describe_lease(lease, now))
    return ExitCode.OK if lease is not None else ExitCode.NOT_HELD


@click.command("acquire")
@_key
@click.argument("owner", callback=to_name)
@_TTL
@database_options
def acquire_cmd(settings: Settings, key: str, owner: str, ttl: int) -> int:
    """Acquire KEY for OWNER, or report the holder (exit 1)."""

    async def body(p: SqlLeaseProvider) -> tuple[Any, datetime]:
        return await p.acquire_lease(key, owner, ttl), await p.now()

    result, now = with_provider(settings, body)
    left = millis_between(result.expires_at, now) if result.expires_at is not None else None
    if settings.as_json:
        emit_json(
            {
                "acquired": result.acquired,
                "key": key,
                "owner": result.owner,
                "fence": result.fence,
                "expires_at": result.expires_at.isoformat() if result.expires_at else None,
                "expires_in_ms": left,
            }
        )
    else:
        shown = f"fence {result.fence}, expires in {format_duration(left or 0)}"
        if result.acquired:
            say(f"acquired {escape(key)} for {escape(owner)} ({shown})")
        else:
            holder = escape(result.owner or "?")
            say(f"not acquired: {escape(key)} is held by {holder} ({shown})")
    return ExitCode.OK if result.acquired else ExitCode.NOT_HELD


@click.command("renew")
@_key
@click.argument("owner", callback=to_name)
@_TTL
@database_options
def renew_cmd(settings: Settings, key: str, owner: str, ttl: int) -> int:
    """Extend OWNER's live lease on KEY to now + TTL (exit 1 when it is not OWNER's)."""

    async def body(p: SqlLeaseProvider) -> tuple[Any, Lease | None, datetime]:
        done = await p.renew(key, owner, ttl)  # reports the fence and new expiry
        return done, None if done else await p.get_lease(key), await p.now()

    done, lease, now = with_provider(settings, body)
    if settings.as_json:
        fields = {"renewed": done is not None, "key": key, "owner": owner}
        if done is not None:
            fields |= {"fence": done[0], "expires_at": done[1].isoformat()}
        emit_json(fields)
    elif done is not None:
        left = format_duration(millis_between(done[1], now))
        say(f"renewed {escape(key)} for {escape(owner)} (fence {done[0]}, expires in {left})")
    else:
        say(f"not renewed: {escape(owner)} holds no live lease on it; {_holder(lease, now)}")
    return ExitCode.OK if done is not None else ExitCode.NOT_HELD


@click.command("release")
@_key
@click.argument("owner", callback=to_name)
@database_options
def release_cmd(settings: Settings, key: str, owner: str) -> int:
    """Release KEY if OWNER holds it (exit 1 when it does not: nothing changes)."""

    async def body(p: SqlLeaseProvider) -> tuple[Any, Lease | None, datetime]:
        done = await p.release(key, owner)  # reports whether it took effect
        return done, None if done else await p.get_lease(key), await p.now()

    done, lease, now = with_provider(settings, body)
    if settings.as_json:
        fields = {"released": done is not None, "key": key, "owner": owner}
        if done is not None:
            fields |= {"fence": done[0], "released_at": done[1].isoformat()}
        emit_json(fields)
    elif done is not None:
        say(f"released {escape(key)} (fence {done[0]}, at {format_time(done[1])})")
    else:
        say(f"not released: {escape(owner)} does not hold it; {_holder(lease, now)}")
    return ExitCode.OK if done is not None else ExitCode.NOT_HELD


@click.command("transfer")
@_key
@click.argument("from_owner", metavar="FROM", callback=to_name)
@click.argument("to_owner", metavar="TO", callback=to_name)
@_TTL
@database_options
def transfer_cmd(settings: Settings, key: str, from_owner: str, to_owner: str, ttl: int) -> int:
    """Hand KEY from FROM to TO with no gap (exit 1 when FROM does not hold it)."""

    async def body(p: SqlLeaseProvider) -> tuple[Any, Lease | None, datetime]:
        done = await p.transfer(key, from_owner, to_owner, ttl)  # reports the new fence
        return done, None if done else await p.get_lease(key), await p.now()

    done, lease, now = with_provider(settings, body)
    if settings.as_json:
        fields = {"transferred": done is not None, "key": key, "from": from_owner, "to": to_owner}
        if done is not None:
            fields |= {"fence": done[0], "expires_at": done[1].isoformat()}
        emit_json(fields)
    elif done is not None:
        left = format_duration(millis_between(done[1], now))
        say(
            f"transferred {escape(key)} from {escape(from_owner)} to {escape(to_owner)} "
            f"(fence {done[0]}, expires in {left})"
        )
    else:
        say(f"not transferred: {escape(from_owner)} does not hold it; {_holder(lease, now)}")
    return ExitCode.OK if done is not None else ExitCode.NOT_HELD


@click.command("force-release")
@_key
@database_options
def force_release_cmd(settings: Settings, key: str) -> int:
    """Release KEY whoever holds it (operator's tool; exit 1 when there was no live lease)."""

    async def body(p: SqlLeaseProvider) -> bool:
        return await p.force_release(key)

    released = with_provider(settings, body)
    if settings.as_json:
        emit_json({"released": released, "key": key})
    else:
        say(f"released {escape(key)}" if released else f"no live lease on {escape(key)}")
    return ExitCode.OK if released else ExitCode.NOT_HELD


@click.command("purge")
@click.option(
    "--min-age",
    default="1m",
    show_default=True,
    callback=to_age,
    metavar="DURATION",
    help="Only rows expired at least this long ago (0s: every expired row).",
)
@database_options
def purge_cmd(settings: Settings, min_age: int) -> int:
    """Delete the rows of expired and released leases (live leases are never touched)."""

    async def body(p: SqlLeaseProvider) -> int:
        return await p.purge_expired(min_age_ms=min_age)

    count = with_provider(settings, body)
    if settings.as_json:
        emit_json({"purged": count})
    else:
        say(f"purged {count} expired lease row{'s' if count != 1 else ''}")
    return ExitCode.OK


COMMANDS = [
    list_cmd,
    get_cmd,
    acquire_cmd,
    renew_cmd,
    release_cmd,
    transfer_cmd,
    force_release_cmd,
    purge_cmd,
]
