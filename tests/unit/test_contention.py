"""The contention hints that let acquire read before it writes (sql_lease._core.contention)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from sql_lease._core import contention as _contention
from sql_lease._core.contention import MAX_HINTS, ContentionHints
from sql_lease._core.contract import AcquireResult, result


def test_a_key_is_contended_only_after_it_was_seen_held() -> None:
    hints = ContentionHints()
    assert not hints.contended(b"k")
    hints.held(b"k")
    assert hints.contended(b"k")
    assert not hints.contended(b"other")


def test_seeing_the_key_free_or_won_clears_the_hint() -> None:
    hints = ContentionHints()
    hints.held(b"k")
    hints.free(b"k")
    assert not hints.contended(b"k")
    hints.free(b"never-seen")  # no error


def test_a_hint_goes_stale_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(_contention, "monotonic", lambda: now[0])
    hints = ContentionHints()
    hints.held(b"k")
    now[0] += _contention.HINT_SECONDS - 0.01
    assert hints.contended(b"k")
    hints.held(b"k")  # seen held again: the hint is refreshed
    now[0] += _contention.HINT_SECONDS - 0.01
    assert hints.contended(b"k")
    now[0] += 0.02
    assert not hints.contended(b"k")
    assert len(hints) == 0  # a stale hint is dropped when found


def test_hints_are_bounded_and_the_oldest_goes_first() -> None:
    hints = ContentionHints()
    for i in range(MAX_HINTS + 10):
        hints.held(b"k%d" % i)
    assert len(hints) == MAX_HINTS
    assert not hints.contended(b"k0")
    assert hints.contended(b"k%d" % (MAX_HINTS + 9))
    hints.held(b"k10")  # refreshed: now the newest
    hints.held(b"one more")
    assert hints.contended(b"k10")
    assert not hints.contended(b"k11")


def test_the_hot_paths_result_is_an_ordinary_acquire_result() -> None:
    at = datetime(2026, 12, 6, tzinfo=UTC)
    made, plain = result(False, "w1", 7, at), AcquireResult(False, "w1", 7, at)
    assert type(made) is AcquireResult
    assert made == plain and hash(made) == hash(plain) and repr(made) == repr(plain)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.owner = "w2"  # type: ignore[misc]
