"""``sql-lease top``: a live view of the lease table, refreshed in place (rich), or its JSON.

Each refresh is one read (`SqlExtensions.list_states`: live leases, leases ended within
``--recent``, keys a waiter wants) through the provider, so it works wherever the other
commands do (PostgreSQL, SQLite) and sends no SQL of its own. ``--once`` shows one view and
exits; ``--json`` writes each view as one JSON document (one per line when it refreshes), for
scripts; ``--count N`` stops after N views. Ctrl-C ends a live view (exit 0). A failure on the
first read is the command's error, as for ``list``; later ones are shown in the view, which
keeps the last rows and tries again at the next refresh (with ``--json`` every failure is the
command's error: a script must not take an old view for a new one). When stdout is not a
terminal and ``--json`` is not given, it shows one view (as ``--once``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from datetime import datetime, timedelta

import click
from rich.live import Live

from .._sqlprovider.provider import SqlLeaseProvider
from ..catalogue import LeaseState
from ..errors import LeaseError
from ._errors import ExitCode
from ._options import Settings, database_options, to_age, to_duration, to_prefix
from ._output import console, emit_json
from ._session import with_provider
from ._top_view import Changes, by_class, view, view_fields

__all__ = ["top_cmd"]


@click.command("top")
@click.option(
    "--prefix",
    default=None,
    callback=to_prefix,
    help="Only keys starting with this (escapes read; empty: every key).",
)
@click.option(
    "--limit",
    default=100,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="At most this many rows per view, in key order.",
)
@click.option(
    "--interval",
    default="1s",
    show_default=True,
    callback=to_duration,
    metavar="DURATION",
    help="Time between refreshes.",
)
@click.option(
    "--recent",
    default="1m",
    show_default=True,
    callback=to_age,
    metavar="DURATION",
    help="Also show leases that ended (released or expired) this recently.",
)
@click.option(
    "--classes",
    "separator",
    default=None,
    metavar="SEP",
    help="Show name classes instead of keys: the part of each key before SEP (e.g. ':').",
)
@click.option("--once", is_flag=True, help="Show one view and exit.")
@click.option(
    "--count",
    default=None,
    type=click.IntRange(1, None),
    help="Stop after this many views.",
)
@database_options
def top_cmd(
    settings: Settings,
    prefix: str | None,
    limit: int,
    interval: int,
    recent: int,
    separator: str | None,
    once: bool,
    count: int | None,
) -> int:
    """A live view of the lease table: keys (or name classes), holders, TTL left, fence,
    waiters and recent changes, refreshed in place (Ctrl-C ends it; exit 0).

    With --json each view is one JSON document (one per line when refreshing); --once shows
    one view and exits.
    """
    if separator == "":
        raise click.BadParameter("must not be empty", param_hint="--classes")
    out = console()
    views = 1 if once or (not settings.as_json and not out.is_terminal) else count
    classes = None if separator is None else by_class(separator)
    window = timedelta(milliseconds=recent)
    header = f"sql-lease top  {settings.target.shown}  table {settings.table}"

    async def body(p: SqlLeaseProvider) -> None:
        changes = Changes()

        async def snapshot() -> tuple[list[LeaseState], datetime]:
            states = await p.list_states(prefix, limit=limit, ended_within_ms=recent)
            now = states[0].now if states else await p.now()
            changes.update(states, window)
            return states, now

        async def pause() -> bool:
            """Wait an interval; False when Ctrl-C asked to stop."""
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval / 1000):
                    await stop.wait()
            return not stop.is_set()

        async def json_lines(states: list[LeaseState], now: datetime) -> None:
            shown = 1
            while True:  # one document per line: JSON Lines
                click.echo(json.dumps(view_fields(states, changes, now, classes)))
                if (views is not None and shown >= views) or not await pause():
                    return
                states, now = await snapshot()
                shown += 1

        async def live_view(states: list[LeaseState], now: datetime) -> None:
            shown = 1
            problem: str | None = None
            first = view(states, changes, now, classes, header)
            with Live(first, console=out, auto_refresh=False) as live:
                while (views is None or shown < views) and await pause():
                    try:
                        states, now = await snapshot()
                        problem = None
                    except LeaseError as exc:  # keep the last view, say why, try again
                        problem = str(exc)
                    shown += 1
                    shown_view = view(states, changes, now, classes, header, problem)
                    live.update(shown_view, refresh=True)

        states, now = await snapshot()  # a failure here is the command's error
        if views == 1:
            if settings.as_json:
                emit_json(view_fields(states, changes, now, classes))
            else:
                out.print(view(states, changes, now, classes, header))
            return
        stop = _on_ctrl_c()
        try:
            if settings.as_json:
                await json_lines(states, now)
            else:
                await live_view(states, now)
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C before the first view
        with_provider(settings, body)
    return ExitCode.OK


def _on_ctrl_c() -> asyncio.Event:
    """An event that Ctrl-C (SIGINT) sets while the view refreshes, so that the view ends
    between two reads, cleanly (exit 0), instead of a `KeyboardInterrupt` landing anywhere.
    Where the loop cannot take the signal (not the main thread, Windows), Ctrl-C still ends
    the command through `KeyboardInterrupt`."""
    stop = asyncio.Event()
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)
    return stop
