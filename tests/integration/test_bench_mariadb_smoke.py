"""The MariaDB benchmark's quick mode runs every cell with every implementation.

No ratio is asserted (timings on a shared machine prove nothing): only that each code path ran,
measured something and saw results that agree with the lease contract (no anomalies).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]


def test_quick_mode_runs_every_cell(
    mariadb_server: object, pg_server: object, tmp_path: Path
) -> None:
    out = tmp_path / "mariadb.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_mariadb.py"),
            "--quick",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    cells = json.loads(out.read_text())["cells"]
    assert set(cells) == {f"{c}_c{n}" for c in ("lifecycle", "read", "hotkey") for n in (1, 16)}
    for label, cell in cells.items():
        assert cell["anomalies"] == 0, label
        assert set(cell["ops_per_s"]) == {"library", "single", "raw", "postgresql", "redis"}
        assert all(v > 0 for v in cell["ops_per_s"].values()), (label, cell)
