"""benchmarks/bench_sync.py --quick runs end to end: both cells, both implementations.

Performance is never asserted: only that every path runs, the numbers are there and no
operation contradicted the contract (an anomaly makes the benchmark exit 1).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import server_url

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_sync.py"


def test_bench_sync_quick_runs_every_cell(tmp_path: Path) -> None:
    out = tmp_path / "sync.json"
    url = server_url().render_as_string(hide_password=False)
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--quick",
            "--threads",
            "2",
            "--pg-url",
            url,
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    cells = {(r["cell"], r["threads"]) for r in report["results"]}
    assert cells == {("lifecycle", 2), ("read", 2)}
    for row in report["results"]:
        assert row["anomalies"] == 0 and row["ratio"] > 0
        assert len(row["library_ops_s"]) == len(row["raw_ops_s"]) == report["rounds"]
    assert "| lifecycle | 2 |" in done.stdout and "ratio" in done.stdout
