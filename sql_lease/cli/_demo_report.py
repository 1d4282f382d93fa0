"""What the demo workers record, the verdict computed from it, and how both are shown.

Everything is judged in database time: each run reports the database clock when it started
(after winning the lease) and when it ended (before handing the lease on), with its fence.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ._format import escape

__all__ = [
    "Processed",
    "Report",
    "RunRecord",
    "Verdict",
    "judge",
    "render_summary",
    "render_timeline",
]


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One run of a thread, in database time."""

    thread: int
    run_id: str
    worker: int
    fence: int | None
    start: datetime
    end: datetime
    started_by: str  #: "acquire" or "transfer"
    previous_run_id: str | None
    signals: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Processed:
    """One signal processed by a run, at database time ``at``."""

    signal: int
    thread: int
    run_id: str
    fence: int | None
    at: datetime
    worker: int


@dataclass(frozen=True, slots=True)
class Verdict:
    """The demo's claims: no two live runs of a thread, each signal processed exactly once."""

    overlaps: int  #: moments when a run of a thread started before another one had ended
    fence_regressions: int  #: runs of a thread whose fence did not exceed the previous run's
    outside_runs: int  #: processed signals not inside their run (time or fence mismatch)
    missing: tuple[int, ...]
    duplicated: tuple[int, ...]

    @property
    def exactly_once(self) -> bool:
        return not self.missing and not self.duplicated

    @property
    def ok(self) -> bool:
        return (
            self.overlaps == 0
            and self.fence_regressions == 0
            and self.outside_runs == 0
            and self.exactly_once
        )


@dataclass(slots=True)
class Report:
    """Everything the parent saw, for the summary."""

    workers: int
    threads: int
    sent: int
    elapsed: float
    runs: list[RunRecord] = field(default_factory=list)
    processed: list[Processed] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)


def judge(sent: int, runs: Iterable[RunRecord], processed: Iterable[Processed]) -> Verdict:
    """Compute the verdict from the recorded runs and processed signals."""
    by_thread: dict[int, list[RunRecord]] = defaultdict(list)
    by_id: dict[str, RunRecord] = {}
    for run in runs:
        by_thread[run.thread].append(run)
        by_id[run.run_id] = run
    overlaps = regressions = 0
    for thread_runs in by_thread.values():
        thread_runs.sort(key=lambda r: (r.start, r.end))
        latest_end: datetime | None = None
        last_fence: int | None = None
        for run in thread_runs:
            if latest_end is not None and run.start < latest_end:
                overlaps += 1
            latest_end = run.end if latest_end is None else max(latest_end, run.end)
            if run.fence is not None:
                if last_fence is not None and run.fence <= last_fence:
                    regressions += 1
                last_fence = run.fence
    counts: Counter[int] = Counter()
    outside = 0
    for item in processed:
        counts[item.signal] += 1
        owner = by_id.get(item.run_id)
        if owner is None or owner.fence != item.fence or not owner.start <= item.at <= owner.end:
            outside += 1
    missing = tuple(s for s in range(sent) if counts[s] == 0)
    duplicated = tuple(sorted(s for s, n in counts.items() if n > 1))
    return Verdict(overlaps, regressions, outside, missing, duplicated)


def summary_fields(report: Report, verdict: Verdict) -> dict[str, Any]:
    """The summary as JSON fields."""
    stats = report.stats
    return {
        "workers": report.workers,
        "threads": report.threads,
        "signals": report.sent,
        "processed": len(report.processed),
        "runs": len(report.runs),
        "routed": stats.get("routed", 0),
        "queued_follow_ups": stats.get("queued", 0),
        "follow_ups_transferred": stats.get("transfers", 0),
        "transfer_fallbacks": stats.get("transfer_failures", 0),
        "releases": stats.get("releases", 0),
        "lease_conflicts": stats.get("conflicts", 0),
        "renewals": stats.get("renewals", 0),
        "leases_lost": stats.get("lost", 0),
        "errors": stats.get("errors", 0),
        "max_hops": stats.get("max_hops", 0),
        "elapsed_s": round(report.elapsed, 3),
        "verdict": {
            "ok": verdict.ok,
            "overlapping_runs": verdict.overlaps,
            "fence_regressions": verdict.fence_regressions,
            "processed_outside_their_run": verdict.outside_runs,
            "exactly_once": verdict.exactly_once,
            "missing": list(verdict.missing),
            "duplicated": list(verdict.duplicated),
        },
    }


def _yes(ok: bool) -> Text:
    return Text("yes", style="green") if ok else Text("NO", style="bold red")


def render_summary(console: Console, report: Report, verdict: Verdict) -> None:
    """The summary table and the verdict."""
    f = summary_fields(report, verdict)
    table = Table(title="sql-lease demo", show_header=False, title_justify="left")
    table.add_column("what")
    table.add_column("count", justify="right")
    rows: list[tuple[str, Any]] = [
        ("workers / threads", f"{f['workers']} / {f['threads']}"),
        ("signals sent", f["signals"]),
        ("signals processed", f["processed"]),
        ("runs", f["runs"]),
        ("routed to the owner's worker", f["routed"]),
        ("queued as follow-ups", f["queued_follow_ups"]),
        ("follow-up runs by transfer", f["follow_ups_transferred"]),
        ("transfer fallbacks", f["transfer_fallbacks"]),
        ("releases", f["releases"]),
        ("lease conflicts", f["lease_conflicts"]),
        ("renewals / leases lost", f"{f['renewals']} / {f['leases_lost']}"),
        ("elapsed", f"{report.elapsed:.1f}s"),
    ]
    for label, value in rows:
        table.add_row(label, str(value))
    console.print(table)
    checks = Table(
        title="verdict (database time and fences)", show_header=False, title_justify="left"
    )
    checks.add_column("check")
    checks.add_column("result", justify="right")
    checks.add_row(
        "moments two runs of one thread were live",
        Text(str(verdict.overlaps), style="green" if verdict.overlaps == 0 else "bold red"),
    )
    checks.add_row("fences increase run after run", _yes(verdict.fence_regressions == 0))
    checks.add_row("each signal processed inside its run", _yes(verdict.outside_runs == 0))
    once = f"{report.sent - len(verdict.missing)}/{report.sent}"
    checks.add_row(f"every signal processed exactly once ({once})", _yes(verdict.exactly_once))
    console.print(checks)
    console.print(
        Text("PASS" if verdict.ok else "FAIL", style="bold green" if verdict.ok else "bold red")
    )


def render_timeline(console: Console, report: Report, keys: Mapping[int, str]) -> None:
    """Per thread: each run's start and end (seconds from the first run), fence and signals."""
    if not report.runs:
        return
    origin = min(r.start for r in report.runs)
    by_thread: dict[int, list[RunRecord]] = defaultdict(list)
    for run in report.runs:
        by_thread[run.thread].append(run)
    for thread in sorted(by_thread):
        table = Table(title=f"thread {escape(keys[thread])}", title_justify="left", box=None)
        for column in ("start", "end", "gap", "run", "fence", "by", "signals"):
            table.add_column(
                column, justify="right" if column in {"start", "end", "gap", "fence"} else "left"
            )
        previous: RunRecord | None = None
        for run in sorted(by_thread[thread], key=lambda r: r.start):
            gap = (
                ""
                if previous is None
                else f"{(run.start - previous.end).total_seconds() * 1000:.1f}ms"
            )
            table.add_row(
                f"{(run.start - origin).total_seconds():.3f}s",
                f"{(run.end - origin).total_seconds():.3f}s",
                gap,
                run.run_id,
                str(run.fence),
                run.started_by
                if run.previous_run_id is None
                else f"transfer from {run.previous_run_id}",
                ", ".join(map(str, run.signals)),
            )
            previous = run
        console.print(table)
