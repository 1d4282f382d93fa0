"""`benchmarks/bench_pooler.py --quick` runs every cell and variant through a real PgBouncer.

No ratio is asserted (timings on a shared machine prove nothing): only that each variant of
each cell measured something (Redis too), that no run failed, and that the JSON has the info
lines, the headline (pooled / direct, pooled / Redis) and the sync provider's pooled / direct.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.infra, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "bench_pooler.py"


def _declared() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The bench's own variant names (its module, loaded from its file)."""
    spec = importlib.util.spec_from_file_location("bench_pooler", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclasses look their module up
    try:
        spec.loader.exec_module(bench)
    finally:
        del sys.modules[spec.name]
    return tuple(bench.VARIANTS), tuple(bench.RAW)


def test_the_quick_run_measures_every_cell_and_variant(tmp_path: Path, pg_server: object) -> None:
    out = tmp_path / "pooler.json"
    variants, raw = _declared()
    assert len(variants) == 10 and len(raw) == 3 and "redis" in variants
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--duration", "0.1", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["failures"] == {}
    results = data["results"]
    for clients in (1, 16):
        for cell in ("lifecycle", "read"):
            for variant in variants:
                row = results[f"{cell}_c{clients}/{variant}"]
                assert row["median_ops_per_s"] > 0
        for variant in raw:
            assert results[f"raw_c{clients}/{variant}"]["median_ops_per_s"] > 0
        assert f"raw_c{clients}" in data["info"]
        for cell in ("lifecycle", "read"):
            line = data["headline"][f"{cell}_c{clients}"]
            assert line["pooled_direct"]["round_median"] > 0
            assert line["pooled_redis"]["round_median"] > 0
            assert data["sync"][f"{cell}_c{clients}"]["round_median"] > 0
    assert "info raw_c16" in done.stdout
    assert "sync lifecycle_c16" in done.stdout
