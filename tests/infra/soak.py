"""``scripts/failover-soak``: N failover rounds on fresh replicated pairs, one line per round."""

from __future__ import annotations

import argparse
import asyncio
import sys

from .cluster import Replicated
from .failover import Figures, analyse, run_round


async def soak(rounds: int, *, synchronous: bool, lag: float) -> list[Figures]:
    out = []
    for n in range(1, rounds + 1):
        with Replicated(synchronous=synchronous) as cluster:
            figures = analyse(await run_round(cluster, lag=lag))
        out.append(figures)
        print(f"round {n}: {figures.line()}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="failover-soak", description=__doc__)
    parser.add_argument("-n", "--rounds", type=int, default=6)
    parser.add_argument("--sync", action="store_true", help="synchronous replication")
    parser.add_argument("--lag", type=float, default=0.4, help="seconds the link stalls (async)")
    args = parser.parse_args(argv)
    lag = 0.0 if args.sync else args.lag
    results = asyncio.run(soak(args.rounds, synchronous=args.sync, lag=lag))
    overlaps = [w for f in results for w in f.overlaps]
    print(
        f"{'sync' if args.sync else f'async, link stalled {lag:.2f} s before the crash'}, "
        f"{len(results)} rounds: acked writes lost {sum(f.writes_lost for f in results)} "
        f"(grants {sum(f.grants_lost for f in results)}); overlaps {len(overlaps)} in "
        f"{sum(1 for f in results if f.overlaps)} rounds "
        f"(longest {max(overlaps, default=0):.0f} ms); "
        f"fence inversions {sum(len(f.inversions) for f in results)} in "
        f"{sum(1 for f in results if f.inversions)} rounds; fences twice "
        f"{sum(len(f.duplicates) for f in results)}"
    )
    bad = any(f.inversions or f.duplicates for f in results)
    if args.sync:
        bad = bad or any(f.writes_lost or f.overlaps for f in results)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
