"""Ratios against the issue's bars, the printed table, JSON, Markdown and the PNG chart."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _sync_report import SYNC_JSON, published_sync_bars, sync_section

__all__ = ["compute_bars", "render_bars", "render_table", "write_chart", "write_json", "write_md"]

Cells = dict[str, dict[str, Any]]
Bar = dict[str, Any]

_LIFECYCLE_OPS = ("acquire_lease", "renew_lease", "transfer_lease", "release_lease")
OBSERVED = "library+otel"  # `_impls.OBSERVED`


def _impl(cells: Cells, cell: str, impl: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = cells.get(cell, {}).get("impls", {}).get(impl)
    return found if found and found.get("status") == "ok" else None


def _op(cells: Cells, cell: str, impl: str, op: str) -> dict[str, Any] | None:
    found = _impl(cells, cell, impl)
    stats: dict[str, Any] | None = found["ops"].get(op) if found else None
    return stats if stats and stats.get("status", "ok") == "ok" else None


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _bar(
    bar: str,
    what: str,
    rounds: list[float],
    pooled: float | None,
    cmp: str,
    threshold: float,
    info: bool = False,
) -> Bar:
    """A bar line. The ratio is the median of per-round ratios (each round's turns ran back to
    back, so drift on a noisy machine cancels within a pair); the pooled ratio is kept too."""
    ratio = _median(rounds) if rounds else pooled
    if ratio is None:
        status = "n/a"
    elif info:
        status = "info"
    else:
        ok = ratio >= threshold if cmp == ">=" else ratio <= threshold
        status = "PASS" if ok else "FAIL"
    return {
        "bar": bar,
        "what": what,
        "ratio": ratio,
        "pooled_ratio": pooled,
        "round_ratios": rounds,
        "cmp": cmp,
        "threshold": threshold,
        "status": status,
    }


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _pair(a: list[float], b: list[float]) -> list[float]:
    if not a or len(a) != len(b) or not all(b):
        return []
    return [x / y for x, y in zip(a, b, strict=True)]


def compute_bars(cells: Cells) -> list[Bar]:
    """One line per bar of the issue (and informational lines for the other implementations)."""
    bars: list[Bar] = []

    def get(cell: str, impl: str, op: str, field: str) -> float | None:
        stats = _op(cells, cell, impl, op)
        return None if stats is None else float(stats[field])

    def op_rounds(cell: str, impl: str, op: str, field: str) -> list[float]:
        stats = _op(cells, cell, impl, op)
        return [float(r[field]) for r in stats.get("rounds", [])] if stats else []

    def total(cell: str, impl: str) -> float | None:
        found = _impl(cells, cell, impl)
        return None if found is None else float(found["ops_per_s"])

    def rounds(cell: str, impl: str) -> list[float]:
        found = _impl(cells, cell, impl)
        return [float(r) for r in found["round_ops_per_s"]] if found else []

    # 1. No library overhead.
    for cell in ("lifecycle_c1", "lifecycle_c16", "read_c1", "read_c16"):
        if cell not in cells:
            continue
        bars.append(
            _bar(
                "1",
                f"{cell} all ops: library/raw ops/s",
                _pair(rounds(cell, "library"), rounds(cell, "raw")),
                _div(total(cell, "library"), total(cell, "raw")),
                ">=",
                0.9,
            )
        )
        if _impl(cells, cell, OBSERVED) is not None:
            # The library with the OpenTelemetry observer on: a lower bar, and its own cost.
            bars.append(
                _bar(
                    "1",
                    f"{cell} all ops: {OBSERVED}/raw ops/s",
                    _pair(rounds(cell, OBSERVED), rounds(cell, "raw")),
                    _div(total(cell, OBSERVED), total(cell, "raw")),
                    ">=",
                    0.8,
                )
            )
            bars.append(
                _bar(
                    "1",
                    f"{cell} all ops: {OBSERVED}/library ops/s",
                    _pair(rounds(cell, OBSERVED), rounds(cell, "library")),
                    _div(total(cell, OBSERVED), total(cell, "library")),
                    ">=",
                    0.8,
                    info=True,
                )
            )
        if cell.startswith("lifecycle"):
            for op in _LIFECYCLE_OPS:
                bars.append(
                    _bar(
                        "1",
                        f"{cell} {op}: raw/library mean latency",
                        _pair(
                            op_rounds(cell, "raw", op, "mean_us"),
                            op_rounds(cell, "library", op, "mean_us"),
                        ),
                        _div(get(cell, "raw", op, "mean_us"), get(cell, "library", op, "mean_us")),
                        ">=",
                        0.9,
                    )
                )

    # 2. Contention costs what a read costs.
    cell = "contention_c64"
    if cell in cells:
        for impl in ("library", "raw", "redis"):
            info = impl != "library"
            for field, label, cmp, threshold in (
                ("ops_per_s", "ops/s", ">=", 0.8),
                ("p99_us", "p99", "<=", 2.0),
            ):
                bars.append(
                    _bar(
                        "2",
                        f"{cell} {impl}: acquire/read {label}",
                        _pair(
                            op_rounds(cell, impl, "acquire_lease", field),
                            op_rounds(cell, impl, "get_lease_owner", field),
                        ),
                        _div(
                            get(cell, impl, "acquire_lease", field),
                            get(cell, impl, "get_lease_owner", field),
                        ),
                        cmp,
                        threshold,
                        info,
                    )
                )

    # 3. Close to Redis.
    for cell, threshold in (("lifecycle_c16", 0.6), ("relaxed_lifecycle_c16", 0.9)):
        if cell not in cells:
            continue
        for impl in ("library", "raw"):
            bars.append(
                _bar(
                    "3",
                    f"{cell}: {impl}/redis ops/s",
                    _pair(rounds(cell, impl), rounds(cell, "redis")),
                    _div(total(cell, impl), total(cell, "redis")),
                    ">=",
                    threshold,
                    impl != "library",
                )
            )

    # 4. Batched renewal.
    cell = "batch_renew"
    if cell in cells:
        for impl in ("library", "raw", "redis"):
            stats = _op(cells, cell, impl, "renew_leases")
            bars.append(
                _bar(
                    "4",
                    f"{cell} {impl}: renew_leases time / single renewals time",
                    list(stats.get("round_batch_over_singles", [])) if stats else [],
                    get(cell, impl, "renew_leases", "batch_over_singles"),
                    "<=",
                    0.05,
                    impl != "library",
                )
            )

    # 5. Scale: latency with a big table vs a small one; footprint after renewal churn.
    if "scale_1k" in cells and "scale_1m" in cells:
        for impl in ("library", "raw", "redis"):
            info = impl != "library"
            bars.append(
                _bar(
                    "5",
                    f"scale {impl}: mean cycle latency 1m/1k rows",
                    _pair(rounds("scale_1k", impl), rounds("scale_1m", impl)),
                    _div(total("scale_1k", impl), total("scale_1m", impl)),
                    "<=",
                    1.2,
                    info,
                )
            )
            for op in (*_LIFECYCLE_OPS, "get_lease_owner"):
                bars.append(
                    _bar(
                        "5",
                        f"scale {impl} {op}: mean latency 1m/1k rows",
                        _pair(
                            op_rounds("scale_1m", impl, op, "mean_us"),
                            op_rounds("scale_1k", impl, op, "mean_us"),
                        ),
                        _div(
                            get("scale_1m", impl, op, "mean_us"),
                            get("scale_1k", impl, op, "mean_us"),
                        ),
                        "<=",
                        1.2,
                        info,
                    )
                )
    if "bloat" in cells:
        for impl in ("library", "raw"):
            found = _impl(cells, "bloat", impl)
            ratio = found["extra"]["size_ratio"] if found else None
            what = f"bloat {impl}: table+index size after all renewals / after the first pass"
            bars.append(_bar("5", what, [], ratio, "<=", 2.0, impl != "library"))
    return bars + _coalescing_bars(cells)


SINGLE = "library-single"  # `_impls.SINGLE`: the library with coalescing off


def _coalescing_bars(cells: Cells) -> list[Bar]:
    """Issue 16's bars ("C1".."C4"): coalesced calls against Redis, and what a lone caller
    pays for coalescing (the library against itself with coalescing off)."""
    bars: list[Bar] = []

    def rounds(cell: str, impl: str, op: str | None = None, field: str = "ops_per_s") -> list:
        if op is None:
            found = _impl(cells, cell, impl)
            return list(found.get("round_ops_per_s", [])) if found else []
        stats = _op(cells, cell, impl, op)
        return [float(r[field]) for r in stats.get("rounds", [])] if stats else []

    def pooled(cell: str, impl: str, op: str | None = None, field: str = "ops_per_s") -> Any:
        if op is None:
            found = _impl(cells, cell, impl)
            return found["ops_per_s"] if found else None
        stats = _op(cells, cell, impl, op)
        return None if stats is None else float(stats[field])

    def versus(bar: str, cell: str, a: str, b: str, cmp: str, threshold: float, **kw: Any) -> None:
        if cell not in cells:
            return
        op, field = kw.get("op"), kw.get("field", "ops_per_s")
        label = {"p99_us": "p99", "ops_per_s": "ops/s"}.get(field, field)
        what = f"{cell}{' ' + op if op else ''}: {a}/{b} {label}"
        if field == "mean_us":
            what = f"{cell} {op}: {a}/{b} mean latency"
        bars.append(
            _bar(
                bar,
                what,
                _pair(rounds(cell, a, op, field), rounds(cell, b, op, field)),
                _div(pooled(cell, a, op, field), pooled(cell, b, op, field)),
                cmp,
                threshold,
                kw.get("info", False),
            )
        )

    # C1. Lifecycle against Redis, durable and relaxed.
    versus("C1", "lifecycle_c64", "library", "redis", ">=", 2.0)
    versus("C1", "lifecycle_c16", "library", "redis", ">=", 1.2)
    versus("C1", "relaxed_lifecycle_c64", "library", "redis", ">=", 2.5)
    versus("C1", "lifecycle_c64", SINGLE, "redis", ">=", 2.0, info=True)
    # C2. The hot key: acquire attempts and reads; reads of many keys.
    for op, threshold in (("acquire_lease", 1.5), ("get_lease_owner", 2.0)):
        versus("C2", "contention_c64", "library", "redis", ">=", threshold, op=op)
    versus("C2", "read_c64", "library", "redis", ">=", 2.0)
    # C3. A lone caller pays nothing for coalescing (mean latency, library/library-single).
    for cell in ("lifecycle_c1", "read_c1"):
        found = _impl(cells, cell, "library")
        for op in found["ops"] if found else ():
            versus("C3", cell, "library", SINGLE, "<=", 1.05, op=op, field="mean_us")
    # C4. Tail latency at 64 callers.
    for op in _LIFECYCLE_OPS:
        versus("C4", "lifecycle_c64", "library", "redis", "<=", 1.0, op=op, field="p99_us")
    return bars


# -- text ------------------------------------------------------------------------------------


def _us(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:.1f} ms"
    if value >= 1000:
        return f"{value / 1000:.2f} ms"
    return f"{value:.0f} µs"


def render_table(cells: Cells) -> str:
    header = (
        f"{'cell':<22} {'impl':<12} {'op':<16} {'ops/s':>10} {'p50':>9} {'p99':>9} {'mean':>9}"
        f" {'cpu/op':>9}"
    )
    lines = [header, "-" * len(header)]
    for cell, data in cells.items():
        for impl, res in data["impls"].items():
            if res.get("status") != "ok":
                lines.append(f"{cell:<22} {impl:<12} {res.get('reason', 'n/a')}")
                continue
            flag = f"  ({res['anomalies']} anomalies)" if res.get("anomalies") else ""
            lines.append(
                f"{cell:<22} {impl:<12} {'(all)':<16} {res['ops_per_s']:>10,.0f}{'':>30}"
                f" {_us(res['client_cpu_us_per_op']):>9}{flag}"
            )
            for op, st in res["ops"].items():
                if st.get("status", "ok") != "ok":
                    lines.append(f"{'':<22} {'':<12} {op:<16} {st['status']:>10}  {st['reason']}")
                    continue
                lines.append(
                    f"{'':<22} {'':<12} {op:<16} {st['ops_per_s']:>10,.0f} {_us(st['p50_us']):>9}"
                    f" {_us(st['p99_us']):>9} {_us(st['mean_us']):>9}"
                )
    return "\n".join(lines)


def _fmt_ratio(bar: Bar) -> str:
    return "n/a" if bar["ratio"] is None else f"{bar['ratio']:.3f}"


def render_bars(bars: list[Bar], quick: bool = False) -> str:
    lines = []
    if quick:
        lines.append("quick mode: tiny sizes and fractions of a second, the ratios mean nothing")
    for b in bars:
        spread = ""
        if len(b["round_ratios"]) > 1:
            spread = (
                f"  rounds {min(b['round_ratios']):.2f}-{max(b['round_ratios']):.2f},"
                f" pooled {b['pooled_ratio']:.3f}"
            )
        lines.append(
            f"bar {b['bar']}  {b['what']:<72} {_fmt_ratio(b):>7}  {b['cmp']} {b['threshold']:<5}"
            f" {b['status']}{spread}"
        )
    counted = [b for b in bars if b["status"] in ("PASS", "FAIL")]
    failed = [b for b in counted if b["status"] == "FAIL"]
    lines.append(
        f"{len(counted) - len(failed)}/{len(counted)} bar lines pass"
        " (ratio = median of the per-round ratios when there are rounds)"
    )
    return "\n".join(lines)


# -- files -----------------------------------------------------------------------------------


def write_json(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")


def _load(env: dict[str, Any]) -> str:
    def fmt(values: list[float]) -> str:
        return "/".join(f"{v:.1f}" for v in values)

    text = fmt(env["loadavg_start"]) + " (1/5/15 min) at the start"
    if "loadavg_end" in env:
        text += ", " + fmt(env["loadavg_end"]) + " at the end"
    return text


def write_md(path: Path, report: dict[str, Any]) -> None:
    meta = report["meta"]
    pg = meta["environment"]["postgresql"]
    rd = meta["environment"]["redis"]
    lines = [
        "# sql_lease benchmark results",
        "",
        f"Run {meta['started']}, mode {'quick' if meta['quick'] else 'full'},"
        f" {meta['rounds']} round(s) of {meta['duration_s']} s per implementation and cell,"
        f" {meta['environment']['cpus']} CPUs, load average {_load(meta['environment'])}.",
        f"PostgreSQL {pg['server_version']} (synchronous_commit={pg['synchronous_commit']},"
        f" autovacuum={pg['autovacuum']}); Redis {rd['version']} (appendonly={rd['appendonly']});"
        f" Python {meta['environment']['python']}, packages {meta['environment']['packages']};"
        f" sql_lease at {meta['environment'].get('sql_lease_git', 'unknown')}.",
        "Absolute figures move ±10-40% between runs on a shared machine: read the ratios,"
        " which come from one run with the implementations alternated round by round.",
        "",
        "Regenerate with `python benchmarks/bench.py --publish`.",
        "",
        "## Bars",
        "",
        "| bar | what | ratio | required | status |",
        "| --- | --- | ---: | --- | --- |",
    ]
    for b in report["bars"]:
        lines.append(
            f"| {b['bar']} | {b['what']} | {_fmt_ratio(b)} | {b['cmp']} {b['threshold']}"
            f" | {b['status']} |"
        )
    lines += ["", "## Measurements", ""]
    for cell, data in report["cells"].items():
        lines += [f"### {cell}", "", data["description"], ""]
        lines += [
            "| impl | op | ops/s | p50 | p99 | mean |",
            "| --- | --- | ---: | ---: | ---: | ---: |",
        ]
        for impl, res in data["impls"].items():
            if res.get("status") != "ok":
                lines.append(f"| {impl} | | n/a | | | |")
                continue
            lines.append(
                f"| {impl} ({res['label']}) | all (client CPU"
                f" {_us(res['client_cpu_us_per_op'])}/op) | {res['ops_per_s']:,.0f} | | | |"
            )
            for op, st in res["ops"].items():
                if st.get("status", "ok") != "ok":
                    lines.append(f"| {impl} | {op} | n/a | | | |")
                    continue
                lines.append(
                    f"| {impl} | {op} | {st['ops_per_s']:,.0f} | {_us(st['p50_us'])}"
                    f" | {_us(st['p99_us'])} | {_us(st['mean_us'])} |"
                )
        lines.append("")
    lines += sync_section(path.parent / SYNC_JSON)
    path.write_text("\n".join(lines))


def write_chart(path: Path, bars: list[Bar], log: Callable[[str], None]) -> bool:
    """Horizontal bars: measured ratio relative to its bar (1.0 = exactly on the bar)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log(
            "--chart needs matplotlib, which is not a dependency of sql_lease:"
            " pip install matplotlib (the optional 'bench' extra); no chart written"
        )
        return False
    shown = [b for b in bars + published_sync_bars(path.parent) if b["status"] in ("PASS", "FAIL")]
    if not shown:
        log("no bar has a ratio to chart")
        return False
    scores = []
    for b in shown:
        if b["cmp"] == ">=":
            scores.append(b["ratio"] / b["threshold"])
        else:
            scores.append(b["threshold"] / b["ratio"] if b["ratio"] else 10.0)
    fig, ax = plt.subplots(figsize=(11, 0.34 * len(shown) + 1.6))
    y = list(range(len(shown)))[::-1]
    colours = ["#2e7d32" if b["status"] == "PASS" else "#c62828" for b in shown]
    ax.barh(y, [min(s, 3.0) for s in scores], color=colours)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks(y)
    ax.set_yticklabels([f"{b['bar']}: {b['what']}" for b in shown], fontsize=7)
    for yi, b, s in zip(y, shown, scores, strict=True):
        ax.text(
            min(s, 3.0) + 0.02,
            yi,
            f"{_fmt_ratio(b)} ({b['cmp']} {b['threshold']})",
            va="center",
            fontsize=7,
        )
    ax.set_xlim(0, 3.6)
    ax.set_xlabel("measured ratio relative to the bar (right of 1.0 passes; clipped at 3)")
    ax.set_title("sql_lease vs its bars")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True
