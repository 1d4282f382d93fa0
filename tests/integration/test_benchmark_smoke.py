"""The benchmark's quick mode runs every cell with every implementation and writes its JSON.

No performance ratio is asserted here (timings on a shared CI machine prove nothing); only that
each code path ran, measured something and saw results that agree with the lease contract.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

#: The quick run (every cell, four implementations) takes about a minute; more on a busy machine.
pytestmark = pytest.mark.timeout(330)

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "bench.py"
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
CELLS = {
    "lifecycle_c1",
    "lifecycle_c16",
    "lifecycle_c64",
    "read_c1",
    "read_c16",
    "read_c64",
    "contention_c64",
    "relaxed_lifecycle_c16",
    "relaxed_lifecycle_c64",
    "batch_renew",
    "scale_1k",
    "scale_1m",
    "bloat",
}
IMPLS = {"raw", "library", "redis"}
#: Cells that also run the library with coalescing off (``library-single``).
WITH_SINGLE = {
    "lifecycle_c1",
    "lifecycle_c16",
    "lifecycle_c64",
    "read_c1",
    "read_c16",
    "read_c64",
    "contention_c64",
}
LIFECYCLE_OPS = {"acquire_lease", "renew_lease", "transfer_lease", "release_lease"}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if importlib.util.find_spec("redis") is None:
        pytest.fail("the benchmark needs redis-py: pip install 'redis[hiredis]'", pytrace=False)
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--quick",
            "--json",
            str(out),
            "--pg-url",
            os.environ.get("SQL_LEASE_TEST_DSN", DEFAULT_DSN),
            "--db-name",
            f"sql_lease_bench_smoke_{uuid.uuid4().hex[:8]}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"bench.py failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def test_quick_run_reports_every_cell_with_every_implementation(report: dict[str, Any]) -> None:
    assert set(report["cells"]) == CELLS
    for cell, data in report["cells"].items():
        expected = IMPLS | {"library-single"} if cell in WITH_SINGLE else IMPLS
        assert set(data["impls"]) == expected, cell
        for impl, result in data["impls"].items():
            assert result["status"] == "ok", (cell, impl)
            assert result["ops_per_s"] > 0, (cell, impl)
            for op, stats in result["ops"].items():
                if stats.get("status", "ok") == "ok":
                    assert stats["count"] > 0, (cell, impl, op)
                    assert stats["ops_per_s"] > 0, (cell, impl, op)
                    assert 0 < stats["p50_us"] <= stats["p99_us"], (cell, impl, op)


def test_quick_run_times_each_operation_of_each_workload(report: dict[str, Any]) -> None:
    cells = report["cells"]
    for impl in IMPLS:
        for cell in (
            "lifecycle_c1",
            "lifecycle_c16",
            "lifecycle_c64",
            "relaxed_lifecycle_c16",
            "relaxed_lifecycle_c64",
        ):
            assert set(cells[cell]["impls"][impl]["ops"]) == LIFECYCLE_OPS
        for cell in ("scale_1k", "scale_1m"):
            assert set(cells[cell]["impls"][impl]["ops"]) == LIFECYCLE_OPS | {"get_lease_owner"}
        for cell in ("read_c1", "read_c16", "read_c64"):
            assert set(cells[cell]["impls"][impl]["ops"]) == {"get_lease_owner"}
        assert set(cells["contention_c64"]["impls"][impl]["ops"]) == {
            "acquire_lease",
            "get_lease_owner",
        }
        assert set(cells["batch_renew"]["impls"][impl]["ops"]) == {"renew_lease", "renew_leases"}
        assert "sizes" in cells["bloat"]["impls"][impl]["extra"]
    # The reference batch renewals always run; the library's is measured once it exists.
    for impl in ("raw", "redis"):
        assert cells["batch_renew"]["impls"][impl]["ops"]["renew_leases"]["count"] > 0
    library_batch = cells["batch_renew"]["impls"]["library"]["ops"]["renew_leases"]
    assert library_batch.get("status", "ok") in {"ok", "n/a"}


def test_quick_run_results_agree_with_the_lease_contract(report: dict[str, Any]) -> None:
    for cell, data in report["cells"].items():
        for impl, result in data["impls"].items():
            assert result["anomalies"] == 0, (cell, impl)


def test_quick_run_reports_a_line_for_every_bar(report: dict[str, Any]) -> None:
    bars = report["bars"]
    assert {b["bar"] for b in bars} == {"1", "2", "3", "4", "5", "C1", "C2", "C3", "C4"}
    assert all(b["status"] in {"PASS", "FAIL", "n/a", "info"} for b in bars)
    assert report["meta"]["quick"] is True
