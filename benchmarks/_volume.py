"""The cells about volume: batched renewal, table size (scale) and renewal churn (bloat)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from _cells import (
    BLOAT_TABLES,
    KEYS_PER_WORKER,
    MAIN_TABLE,
    SCALE_TABLES,
    CellResult,
    Context,
    Phases,
    cell_result,
    timed,
)
from _impls import Impl
from _setup import fill_pg, fill_redis, hot_update_stats, table_size, vacuum_analyze
from _workloads import (
    HOLD_TTL_MS,
    HOLDER,
    TTL_MS,
    Tally,
    Worker,
    hold,
    lifecycle,
    renew_round_robin,
    sequential_renewals,
)

__all__ = ["batch_cell", "bloat_cell", "scale_cells"]


async def batch_cell(ctx: Context) -> dict[str, CellResult]:
    n = ctx.sizes.batch
    singles = {name: Tally() for name in ctx.impls}
    batch_s: dict[str, list[float]] = {name: [] for name in ctx.impls}
    batch_bad = dict.fromkeys(ctx.impls, 0)
    labels: dict[str, str] = {}
    missing: dict[str, str] = {}
    sources: dict[str, str] = {}
    for rnd in range(min(ctx.rounds, 3)):  # 10,000 single renewals take seconds already
        for name in ctx.impls:
            impl = await ctx.open(name, concurrency=1)
            labels[name] = impl.label
            sources[name] = impl.renew_many_note
            prefix = f"bt:{name}:"
            items = [(f"{prefix}{i}", HOLDER) for i in range(1, n + 1)]
            try:
                if name == "redis":
                    await fill_redis(ctx.redis, ctx.prefix + prefix, 1, n, HOLDER, HOLD_TTL_MS)
                else:
                    await fill_pg(ctx.admin, MAIN_TABLE, prefix, 1, n, HOLDER, HOLD_TTL_MS)
                await sequential_renewals(impl.ops, items[:50], TTL_MS)  # warm up
                m = await sequential_renewals(impl.ops, items, TTL_MS)
                singles[name].add(m)
                msg = f"batch_renew round {rnd + 1} {name}: {n} single renewals {m.elapsed_s:.3f}s"
                if impl.renew_many is None:
                    missing[name] = impl.renew_many_note
                    ctx.log(msg + "; renew_leases n/a")
                    continue
                await impl.renew_many(items[:50], TTL_MS)  # warm up
                start = time.perf_counter()
                renewed = await impl.renew_many(items, TTL_MS)
                elapsed = time.perf_counter() - start
                batch_s[name].append(elapsed)
                batch_bad[name] += len(renewed) != n or not all(renewed)
                ctx.log(msg + f", one renew_leases {elapsed:.3f}s")
            finally:
                await impl.close()
    impls: dict[str, Any] = {}
    for name in ctx.impls:
        summary = {"label": labels[name], **singles[name].summary()}
        single_s = singles[name].elapsed_s
        times = sorted(batch_s[name])
        if name in missing:
            summary["ops"]["renew_leases"] = {"status": "n/a", "reason": missing[name]}
        else:
            summary["ops"]["renew_leases"] = {
                "count": n * len(times),
                "ops_per_s": n * len(times) / sum(times),
                "mean_us": sum(times) / len(times) * 1e6,
                "p50_us": times[len(times) // 2] * 1e6,
                "p99_us": times[-1] * 1e6,
                "anomalies": batch_bad[name],
                "batch_over_singles": sum(times) / single_s,
                "round_batch_over_singles": [
                    b / r["elapsed_s"]
                    for b, r in zip(
                        batch_s[name], singles[name].op_rounds["renew_lease"], strict=True
                    )
                ],
                "source": sources[name],
            }
        impls[name] = summary
    text = (
        f"{n} held leases: {n} single renew_lease calls one after another (concurrency 1),"
        " then one renew_leases(items) call"
    )
    return {"batch_renew": cell_result(text, 1, impls, leases=n)}


async def scale_cells(ctx: Context) -> dict[str, CellResult]:
    sizes = {"scale_1k": ctx.sizes.scale_small, "scale_1m": ctx.sizes.scale_big}
    facts: dict[str, dict[str, Any]] = {}
    for cell, rows in sizes.items():
        table = SCALE_TABLES[cell]
        start = time.perf_counter()
        await fill_pg(ctx.admin, table, "fill:", 1, rows, HOLDER, 10 * HOLD_TTL_MS)
        await vacuum_analyze(ctx.admin, table)
        await fill_redis(ctx.redis, f"{ctx.prefix}{cell}:fill:", 1, rows, HOLDER, 10 * HOLD_TTL_MS)
        size = await table_size(ctx.admin, table)
        facts[cell] = {"filler_rows": rows, "table_bytes_after_fill": size}
        ctx.log(
            f"{cell}: filled {rows:,} rows ({size / 2**20:.1f} MiB) in "
            f"{time.perf_counter() - start:.1f}s"
        )

    def phases_for(rows: int) -> Phases:
        async def phases(impl: Impl) -> list[Worker]:
            def keys_for(w: int) -> list[str]:
                return [f"lc:{impl.name}:{w}:{j}" for j in range(KEYS_PER_WORKER)]

            return [lifecycle(impl.ops, keys_for, read_range=rows)]

        return phases

    # Alternate the two table sizes too, in reverse order every other round, so that neither
    # drift nor going second can favour one of them.
    per_round: dict[str, list[dict[str, Any]]] = {cell: [] for cell in sizes}
    for rnd in range(ctx.rounds):
        order = list(sizes.items())
        for cell, rows in order if rnd % 2 == 0 else order[::-1]:
            one = dataclasses.replace(ctx, rounds=1)
            per_round[cell].append(
                await timed(
                    one,
                    cell,
                    1,
                    phases_for(rows),
                    table=SCALE_TABLES[cell],
                    space=f"{cell}:",
                    first_round=rnd,
                )
            )
    out: dict[str, CellResult] = {}
    for cell, rows in sizes.items():
        text = (
            f"lifecycle at concurrency 1 plus get_lease_owner of a random filler key, with"
            f" {rows:,} filler rows in the table"
        )
        out[cell] = cell_result(text, 1, _merge_rounds(per_round[cell]), **facts[cell])
    return out


def _merge_rounds(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Pool single-round summaries (counts and times add; percentiles from pooled samples)."""
    merged: dict[str, Any] = {}
    for name in rounds[0]:
        parts = [r[name] for r in rounds]
        count = sum(p["count"] for p in parts)
        elapsed = sum(p["elapsed_s"] for p in parts)
        ops: dict[str, Any] = {}
        for op in parts[0]["ops"]:
            each = [p["ops"][op] for p in parts]
            n = sum(e["count"] for e in each)
            ops[op] = {
                "count": n,
                "ops_per_s": n / elapsed if elapsed else 0.0,
                "mean_us": sum(e["mean_us"] * e["count"] for e in each) / n if n else 0.0,
                # Medians and p99s of whole rounds: pooled samples are not kept across rounds.
                "p50_us": sorted(e["p50_us"] for e in each)[len(each) // 2],
                "p99_us": max(e["p99_us"] for e in each),
                "rounds": [r for e in each for r in e["rounds"]],
            }
        merged[name] = {
            **parts[0],
            "ops_per_s": count / elapsed if elapsed else 0.0,
            "count": count,
            "elapsed_s": elapsed,
            "anomalies": sum(p["anomalies"] for p in parts),
            "client_cpu_us_per_op": (
                sum(p["client_cpu_us_per_op"] * p["count"] for p in parts) / count if count else 0.0
            ),
            "round_ops_per_s": [r for p in parts for r in p["round_ops_per_s"]],
            "ops": ops,
        }
    return merged


async def bloat_cell(ctx: Context) -> dict[str, CellResult]:
    sz = ctx.sizes
    concurrency = 16
    keys = [f"bl:{j}" for j in range(sz.bloat_leases)]
    impls: dict[str, Impl] = {}
    tallies = {name: Tally() for name in ctx.impls}
    sizes: dict[str, dict[str, int]] = {}
    try:
        for name in ctx.impls:
            table = BLOAT_TABLES.get(name, MAIN_TABLE)
            impls[name] = impl = await ctx.open(
                name, concurrency=concurrency, table=table, space="bloat:"
            )
            before = await _footprint(ctx, name)
            failed = await hold(impl.ops, keys, concurrency)
            sizes[name] = {"empty": before, "after_acquire": await _footprint(ctx, name)}
            tallies[name].anomalies += failed
        # The first pass: every lease renewed once.
        for name, impl in impls.items():
            m = await renew_round_robin(impl.ops, keys, HOLDER, sz.bloat_leases, concurrency)
            tallies[name].add(m)
            sizes[name]["after_first"] = await _footprint(ctx, name)
        # The bar is about the library; the others do a quarter as many, for reference only.
        totals = {
            name: sz.bloat_renewals if name == "library" else max(sz.bloat_renewals // 4, 1)
            for name in impls
        }
        done = dict.fromkeys(impls, sz.bloat_leases)
        for chunk in range(1, sz.bloat_chunks + 1):
            for name, impl in impls.items():
                target = (
                    sz.bloat_leases + (totals[name] - sz.bloat_leases) * chunk // sz.bloat_chunks
                )
                if target <= done[name]:
                    continue
                m = await renew_round_robin(
                    impl.ops, keys, HOLDER, target - done[name], concurrency
                )
                done[name] = target
                tallies[name].add(m)
                ctx.log(f"bloat {name}: {target:,} renewals, {m.count / m.elapsed_s:,.0f}/s")
        for name in impls:
            sizes[name]["after_all"] = await _footprint(ctx, name)
    finally:
        for impl in impls.values():
            await impl.close()
    out: dict[str, Any] = {}
    for name, impl in impls.items():
        s = sizes[name]
        tallies[name].extra.update(
            {
                "unit": "bytes used by Redis" if name == "redis" else "pg_total_relation_size",
                "renewals": tallies[name].count,
                "sizes": s,
                "size_ratio": s["after_all"] / s["after_first"] if s["after_first"] else None,
            }
        )
        if name in BLOAT_TABLES:
            tallies[name].extra["table_stats"] = await hot_update_stats(
                ctx.admin, BLOAT_TABLES[name]
            )
        out[name] = {"label": impl.label, **tallies[name].summary()}
    text = (
        f"{sz.bloat_renewals:,} renewals by the library (a quarter as many by the others; 16"
        f" workers) over {sz.bloat_leases:,} live leases; footprint after the first pass (every"
        " lease renewed once) vs after all"
    )
    return {"bloat": cell_result(text, concurrency, out)}


async def _footprint(ctx: Context, name: str) -> int:
    if name in BLOAT_TABLES:
        return await table_size(ctx.admin, BLOAT_TABLES[name])
    info = await ctx.redis.info("memory")
    return int(info["used_memory"])
