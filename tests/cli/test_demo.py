"""The demo: worker processes, routing, transfers, and a verdict that must hold."""

from __future__ import annotations

import json

from .conftest import Cli


def test_the_demo_processes_every_signal_once_with_no_overlapping_runs(
    cli: Cli, cli_url: str
) -> None:
    result = cli(
        "demo", "--url", cli_url, "--workers", "3", "--threads", "3", "--signals", "60",
        "--interval", "3ms", "--work", "15ms", "--ttl", "600ms", "--seed", "7", "--json",
    )  # fmt: skip
    assert result.code == 0, result.err
    summary = json.loads(result.out)
    verdict = summary["verdict"]
    assert verdict["ok"] and verdict["overlapping_runs"] == 0 and verdict["exactly_once"]
    assert (summary["signals"], summary["processed"]) == (60, 60)
    # With 3 workers on 3 threads, losers route and owners hand over to follow-ups.
    assert summary["routed"] >= summary["lease_conflicts"] > 0
    assert summary["follow_ups_transferred"] > 0 and summary["runs"] < 60


def test_the_demo_shows_a_summary_and_a_timeline(sql_lease: Cli, cli_url: str) -> None:
    result = sql_lease(
        "demo", "--url", cli_url, "--workers", "2", "--threads", "2", "--signals", "12",
        "--interval", "5ms", "--timeline",
    )  # fmt: skip
    assert result.code == 0, result.err
    assert "thread demo-" in result.out and r"\x00thread-0" in result.out
    for row in (
        "signals sent",
        "runs",
        "routed",
        "follow-up runs by transfer",
        "releases",
        "lease conflicts",
        "moments two runs of one thread were live",
    ):
        assert row in result.out
    assert result.out.rstrip().endswith("PASS")
