"""The demo's verdict, computed from recorded runs (no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sql_lease.cli._demo_report import Processed, RunRecord, judge

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def run(
    run_id: str, start: int, end: int, fence: int, signals: tuple[int, ...], thread: int = 0
) -> RunRecord:
    return RunRecord(thread, run_id, 0, fence, at(start), at(end), "acquire", None, signals)


def done(signal: int, run_id: str, t: int, fence: int, thread: int = 0) -> Processed:
    return Processed(signal, thread, run_id, fence, at(t), 0)


def test_back_to_back_runs_with_every_signal_once_pass() -> None:
    runs = [run("a", 0, 10, 1, (0,)), run("b", 10, 20, 2, (1,)), run("c", 5, 8, 3, (2,), thread=1)]
    processed = [done(0, "a", 5, 1), done(1, "b", 15, 2), done(2, "c", 6, 3, thread=1)]
    verdict = judge(3, runs, processed)
    assert verdict.ok and verdict.overlaps == 0 and verdict.exactly_once


def test_overlapping_runs_of_one_thread_are_counted() -> None:
    runs = [run("a", 0, 10, 1, ()), run("b", 9, 20, 2, ()), run("c", 15, 30, 3, ())]
    verdict = judge(0, runs, [])
    assert verdict.overlaps == 2 and not verdict.ok


def test_missing_and_duplicated_signals_fail_exactly_once() -> None:
    runs = [run("a", 0, 10, 1, (0, 0))]
    verdict = judge(2, runs, [done(0, "a", 1, 1), done(0, "a", 2, 1)])
    assert verdict.missing == (1,) and verdict.duplicated == (0,)
    assert not verdict.exactly_once and not verdict.ok


def test_a_fence_that_does_not_increase_fails() -> None:
    verdict = judge(0, [run("a", 0, 10, 5, ()), run("b", 11, 20, 5, ())], [])
    assert verdict.fence_regressions == 1 and not verdict.ok


def test_work_outside_its_run_or_under_another_fence_fails() -> None:
    runs = [run("a", 0, 10, 1, (0, 1))]
    verdict = judge(2, runs, [done(0, "a", 11, 1), done(1, "a", 5, 9)])
    assert verdict.outside_runs == 2 and not verdict.ok
