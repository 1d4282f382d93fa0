"""``sql-lease demo``: worker processes coordinate thread runs through leases, live.

The parent applies the migrations, starts the workers (multiprocessing, spawn), sends a stream
of signals for a few threads to random workers, shows progress, then prints a summary and a
verdict computed from what the workers recorded in database time.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import random
import secrets
import tempfile
import time
from contextlib import ExitStack
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .. import migrate
from ._db import Target, resolve
from ._demo_report import Report, judge, render_summary, render_timeline, summary_fields
from ._demo_worker import WorkerConfig, thread_key, worker_main
from ._errors import CliError, ExitCode, describe
from ._options import json_option, to_duration, to_ttl
from ._output import console, emit_json, note

__all__ = ["demo_cmd"]

_START_TIMEOUT = 60.0  # seconds for every worker to import, connect and report ready
_STOP_TIMEOUT = 20.0


class _Cluster:
    """The worker processes, their inboxes and the shared event queue."""

    def __init__(self, workers: int, config: WorkerConfig) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.inboxes: list[Queue[Any]] = [ctx.Queue() for _ in range(workers)]
        self.events: Queue[Any] = ctx.Queue()
        self.procs: list[BaseProcess] = [
            ctx.Process(
                target=worker_main,
                args=(i, config, self.inboxes, self.events),
                name=f"sql-lease-demo-{i}",
                daemon=True,
            )
            for i in range(workers)
        ]
        self.report = Report(workers, 0, 0, 0.0)
        self.done: set[int] = set()  # ids of the signals processed so far
        self.stopped: set[int] = set()

    def start(self) -> None:
        for proc in self.procs:
            proc.start()

    def poll(self, timeout: float) -> bool:
        """Take one event (waiting up to ``timeout``); False when none came."""
        try:
            event = self.events.get(timeout=timeout) if timeout > 0 else self.events.get_nowait()
        except queue.Empty:
            self._check_alive()
            return False
        kind = event[0]
        if kind == "processed":
            self.report.processed.append(event[1])
            self.done.add(event[1].signal)
        elif kind == "run":
            self.report.runs.append(event[1])
        elif kind == "stats":
            self.stopped.add(event[1])
            for name, value in event[2].items():
                merge = max if name == "max_hops" else int.__add__
                self.report.stats[name] = merge(self.report.stats.get(name, 0), value)
        elif kind == "ready":
            self.stopped.discard(event[1])
        elif kind == "error":
            raise CliError(f"demo worker {event[1]}: {event[3]}", ExitCode(event[2]))
        return True

    def _check_alive(self) -> None:
        for i, proc in enumerate(self.procs):
            if i not in self.stopped and proc.exitcode is not None:
                raise CliError(f"demo worker {i} exited ({proc.exitcode})", ExitCode.DATABASE)

    def wait_ready(self) -> None:
        ready: set[int] = set()
        deadline = time.monotonic() + _START_TIMEOUT
        while len(ready) < len(self.procs):
            if time.monotonic() > deadline:
                raise CliError("demo workers did not start in time", ExitCode.DATABASE)
            try:
                event = self.events.get(timeout=0.2)
            except queue.Empty:
                self._check_alive()
                continue
            if event[0] == "error":
                raise CliError(f"demo worker {event[1]}: {event[3]}", ExitCode(event[2]))
            if event[0] == "ready":
                ready.add(event[1])

    def stop(self) -> None:
        """Ask every worker to finish its runs and report its counters."""
        for inbox in self.inboxes:
            inbox.put(("stop",))
        deadline = time.monotonic() + _STOP_TIMEOUT
        while len(self.stopped) < len(self.procs) and time.monotonic() < deadline:
            self.poll(0.1)
        for proc in self.procs:
            proc.join(timeout=max(0.1, deadline - time.monotonic()))

    def kill(self) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self.procs:
            proc.join(timeout=5)


def _progress(json_mode: bool) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=console(stderr=True),
        disable=json_mode,
        transient=False,
    )


def _stream(
    cluster: _Cluster,
    rng: random.Random,
    threads: int,
    signals: int,
    interval_ms: int,
    deadline_s: float,
    json_mode: bool,
) -> float:
    """Send the signals, follow progress until all are processed, stop the workers; returns
    the seconds until the last signal was processed (or the deadline)."""
    report = cluster.report
    started = time.monotonic()
    give_up = started + deadline_s
    with _progress(json_mode) as progress:
        task = progress.add_task("signals processed", total=signals, detail="")

        def refresh() -> None:
            transfers = sum(r.started_by == "transfer" for r in report.runs)
            detail = f"runs {len(report.runs)} (by transfer {transfers})"
            progress.update(task, completed=len(cluster.done), detail=detail)

        next_send = started
        for signal_id in range(signals):
            thread = rng.randrange(threads)
            worker = rng.randrange(len(cluster.inboxes))
            cluster.inboxes[worker].put(("signal", signal_id, thread, 0))
            next_send += interval_ms / 1000
            while (pause := next_send - time.monotonic()) > 0:
                cluster.poll(min(pause, 0.05))
            refresh()
        while len(cluster.done) < signals and time.monotonic() < give_up:
            cluster.poll(0.05)
            refresh()
        elapsed = time.monotonic() - started
        # The last runs end and report while the workers stop: the bar shows them too, so it
        # ends on the numbers of the summary table.
        cluster.stop()
        refresh()
    return elapsed


@click.command("demo")
@click.option(
    "--url",
    metavar="URL",
    help="Database URL (default: $SQL_LEASE_DATABASE_URL, else a temporary SQLite file).",
)
@click.option("--workers", default=4, show_default=True, type=click.IntRange(1, 64))
@click.option("--threads", default=5, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--signals", default=200, show_default=True, type=click.IntRange(1, 1_000_000))
@click.option(
    "--interval",
    default="10ms",
    show_default=True,
    callback=to_duration,
    metavar="DURATION",
    help="Pause between two signals.",
)
@click.option(
    "--work",
    default="25ms",
    show_default=True,
    callback=to_duration,
    metavar="DURATION",
    help="Mean work per signal.",
)
@click.option(
    "--ttl",
    default="3s",
    show_default=True,
    callback=to_ttl,
    metavar="DURATION",
    help="Lease TTL (runs renew every third of it).",
)
@click.option(
    "--deadline",
    default="60s",
    show_default=True,
    callback=to_duration,
    metavar="DURATION",
    help="Give up waiting for signals after this.",
)
@click.option("--seed", type=int, default=None, help="Seed for reproducible choices.")
@click.option("--timeline", is_flag=True, help="Also print a per-thread timeline of runs.")
@json_option
def demo_cmd(
    url: str | None,
    workers: int,
    threads: int,
    signals: int,
    interval: int,
    work: int,
    ttl: int,
    deadline: int,
    seed: int | None,
    timeline: bool,
    as_json: bool,
) -> int:
    """Worker processes share thread runs through leases: a live demo with a verdict.

    Without --url (or $SQL_LEASE_DATABASE_URL) it runs on a SQLite file in a temporary folder.
    Every signal for a thread goes to a random worker; the worker that wins the thread's lease
    runs it, the others route the signal to it, follow-ups take over by transfer. The verdict
    checks, in database time, that no two runs of a thread were ever live at once and that
    every signal was processed exactly once (exit 1 otherwise).
    """
    seed = seed if seed is not None else secrets.randbelow(2**31)
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sql-lease-demo-")))
        target = resolve(url, embedded_path=folder / "demo.db")
        if target.note:
            note(target.note)
        _migrate(target)
        prefix = f"demo-{secrets.token_hex(3)}"
        config = WorkerConfig(target.url, prefix, ttl, work, seed)
        cluster = _Cluster(workers, config)
        stack.callback(cluster.kill)
        cluster.start()
        cluster.wait_ready()
        elapsed = _stream(
            cluster, random.Random(seed), threads, signals, interval, deadline / 1000, as_json
        )
    report = cluster.report
    report.threads, report.sent, report.elapsed = threads, signals, elapsed
    verdict = judge(signals, report.runs, report.processed)
    if as_json:
        emit_json({**summary_fields(report, verdict), "seed": seed, "keys_prefix": prefix})
    else:
        out = console()
        if timeline:
            render_timeline(out, report, {t: thread_key(prefix, t) for t in range(threads)})
        render_summary(out, report, verdict)
        note(f"seed {seed}; thread keys {prefix}\\x00thread-N")
    return ExitCode.OK if verdict.ok else ExitCode.NOT_HELD


def _migrate(target: Target) -> None:
    try:
        asyncio.run(migrate.upgrade_async(target.url))
    except Exception as exc:
        described = describe(exc, where=target.shown, secrets=target.secrets)
        if described is None:
            raise
        raise CliError(described[1], described[0]) from exc
