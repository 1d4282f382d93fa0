"""The sync provider's benchmark (bench_sync.py) in the published results and chart.

``bench_sync.py --publish`` keeps its report in `SYNC_JSON` next to results.md; `_report`'s
``write_md`` and ``write_chart`` add it (its own section; bars labelled "sync") whenever they
write next to it, so ``bench.py --publish`` keeps the sync results and ``bench_sync.py
--publish`` refreshes them (`published_bars` reads bench.py's bars back from results.md to
redraw the chart). Imports nothing from `_report`.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

__all__ = ["SYNC_JSON", "published_bars", "published_sync_bars", "sync_bars", "sync_section"]

SYNC_JSON = "results_sync.json"
HEADING = "## Sync provider vs raw psycopg"
_MAIN_BARS_HEADER = "| bar | what | ratio | required | status |"

Bar = dict[str, Any]


def _line(what: str, rounds: list[float], pooled: float, threshold: float | None) -> Bar:
    """A bar line in `_report`'s shape: the ratio is the median of the per-round ratios."""
    ratio = statistics.median(rounds) if rounds else pooled
    status = "info" if threshold is None else "PASS" if ratio >= threshold else "FAIL"
    return {
        "bar": "sync",
        "what": what,
        "ratio": ratio,
        "pooled_ratio": pooled,
        "round_ratios": rounds,
        "cmp": ">=",
        "threshold": 0.0 if threshold is None else threshold,
        "status": status,
    }


def sync_bars(report: dict[str, Any]) -> list[Bar]:
    """The sync benchmark's bar lines: library/raw psycopg ops/s per cell and thread count."""
    bars = []
    for r in report["results"]:
        lib, raw = r["library_ops_s"], r["raw_ops_s"]
        threads = r["threads"]
        what = (
            f"{r['cell']}, {threads} thread{'s' if threads != 1 else ''}:"
            " sync library/raw psycopg ops/s"
        )
        rounds = [a / b for a, b in zip(lib, raw, strict=True) if b]
        pooled = statistics.median(lib) / statistics.median(raw)
        bars.append(_line(what, rounds, pooled, r["bar"]))
    return bars


def published_sync_bars(folder: Path) -> list[Bar]:
    """The bars of the sync report published in ``folder``, or none."""
    found = folder / SYNC_JSON
    return sync_bars(json.loads(found.read_text())) if found.is_file() else []


def _us(value: float) -> str:
    return f"{value / 1000:.2f} ms" if value >= 1000 else f"{value:.0f} µs"


def sync_section(found: Path) -> list[str]:
    """Markdown lines for the sync report at ``found`` (none when it is missing)."""
    if not found.is_file():
        return []
    report = json.loads(found.read_text())
    env = report["environment"]
    load = "/".join(f"{v:.1f}" for v in env["loadavg_before"])
    after = "/".join(f"{v:.1f}" for v in env["loadavg_after"])
    lines = [
        HEADING,
        "",
        f"`sql_lease.sync.SqlLeaseProvider` against raw psycopg {env['psycopg']} running the"
        " provider's own statements with its connection settings (see `bench_sync.py`). Run"
        f" {report.get('started', '?')}, {report['rounds']} alternating round(s) of"
        f" {report['duration_s']} s per implementation and cell, {env['cpus']} CPUs, load"
        f" average {load} at the start, {after} at the end. The ratio is the median of the"
        " per-round ratios. Regenerate with `python benchmarks/bench_sync.py --publish`.",
        "",
        "| bar | what | ratio | rounds | required | status |",
        "| --- | --- | ---: | --- | --- | --- |",
    ]
    for b in sync_bars(report):
        rounds = b["round_ratios"]
        spread = f"{min(rounds):.2f}-{max(rounds):.2f}" if rounds else ""
        lines.append(
            f"| {b['bar']} | {b['what']} | {b['ratio']:.3f} | {spread} | {b['cmp']}"
            f" {b['threshold']} | {b['status']} |"
        )
    lines += [
        "",
        "| cell | threads | library ops/s | raw ops/s | library CPU/op | raw CPU/op |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in report["results"]:
        cpu = r.get("cpu_us_per_op")
        lib_cpu, raw_cpu = (
            (_us(statistics.median(cpu["library"])), _us(statistics.median(cpu["raw"])))
            if cpu
            else ("", "")
        )
        lines.append(
            f"| {r['cell']} | {r['threads']} | {statistics.median(r['library_ops_s']):,.0f}"
            f" | {statistics.median(r['raw_ops_s']):,.0f} | {lib_cpu} | {raw_cpu} |"
        )
    lines.append("")
    return lines


def published_bars(md: Path) -> list[Bar]:
    """bench.py's bar lines as results.md shows them (its Bars table), to redraw the chart."""
    bars: list[Bar] = []
    if not md.is_file():
        return bars
    in_table = False
    for line in md.read_text().splitlines():
        if line.startswith(_MAIN_BARS_HEADER):
            in_table = True
            continue
        if not in_table or line.startswith("| ---"):
            continue
        if not line.startswith("|"):
            break
        bar, what, ratio, required, status = (c.strip() for c in line.strip("|").split("|"))
        cmp, threshold = required.split()
        value = None if ratio == "n/a" else float(ratio)
        bars.append(
            {
                "bar": bar,
                "what": what,
                "ratio": value,
                "pooled_ratio": value,
                "round_ratios": [],
                "cmp": cmp,
                "threshold": float(threshold),
                "status": status,
            }
        )
    return bars
