"""Reading durations and escaped names, showing them back (no database)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sql_lease.cli._format import escape, format_duration, format_time
from sql_lease.cli._values import parse_duration_ms, unescape


@pytest.mark.parametrize(
    ("text", "millis"),
    [
        ("500ms", 500),
        ("15s", 15_000),
        ("1.5s", 1_500),
        ("2m", 120_000),
        ("1h", 3_600_000),
        ("1d", 86_400_000),
        (" 7 S ", 7_000),
        ("0.001s", 1),
    ],
)
def test_durations_read_as_whole_milliseconds(text: str, millis: int) -> None:
    assert parse_duration_ms(text) == millis


@pytest.mark.parametrize("text", ["15", "15x", "s", "-1s", "1.5ms", "0s", "0.0001s", "", "1e3s"])
def test_bad_durations_are_rejected_with_a_reason(text: str) -> None:
    with pytest.raises(ValueError, match=r"duration|milliseconds|too short"):
        parse_duration_ms(text)


@pytest.mark.parametrize(
    ("text", "limit"),
    [("400d", "365d"), ("9000h", "8760h"), ("600000m", "525600m"), ("40000000s", "31536000s")],
)
def test_a_duration_over_the_maximum_names_the_limit_in_the_unit_written(
    text: str, limit: str
) -> None:
    with pytest.raises(ValueError, match="too long") as caught:
        parse_duration_ms(text, maximum=365 * 86_400_000)
    assert str(caught.value) == f"{text!r} is too long: at most {limit}"
    assert parse_duration_ms(limit, maximum=365 * 86_400_000) == 365 * 86_400_000


def test_a_zero_age_is_allowed_where_asked_for() -> None:
    assert parse_duration_ms("0s", minimum=0) == 0


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (r"a\0b", "a\0b"),
        (r"res\0123", "res\x00123"),  # \0 is always NUL, never octal
        (r"a\x00b", "a\0b"),
        (r"\u00e9\U0001F600", "\u00e9\U0001f600"),
        (r"tab\there\n", "tab\there\n"),
        (r"back\\slash", "back\\slash"),
        ("plain é", "plain é"),
    ],
)
def test_python_style_escapes_are_decoded(text: str, value: str) -> None:
    assert unescape(text) == value


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (r"a\q", "unknown escape"),
        ("a\\", "lone backslash"),
        (r"\x0", "2 hex"),
        (r"\xzz", "2 hex"),
        (r"\U00110000", "Unicode"),
    ],
)
def test_bad_escapes_are_rejected(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        unescape(text)


def test_unprintable_characters_are_shown_escaped() -> None:
    assert escape("a\0b") == r"a\x00b"
    assert escape("a\\0b") == r"a\\0b"  # a backslash and a zero: not the same key as a\x00b
    assert escape("x\n\t\x7f\u200b\U000e0001é") == r"x\n\t\x7f\u200b\U000e0001é"


@given(st.text())
def test_escaped_names_read_back_to_themselves(text: str) -> None:
    shown = escape(text)
    assert shown.isprintable()
    assert unescape(shown) == text


@pytest.mark.parametrize(
    ("millis", "text"),
    [
        (850, "850ms"),
        (14_240, "14.2s"),
        (123_000, "2m03s"),
        (3_720_000, "1h02m"),
        (273_600_000, "3d04h"),
        (-1500, "-1.5s"),
    ],
)
def test_durations_are_shown_short(millis: int, text: str) -> None:
    assert format_duration(millis) == text


def test_times_are_shown_in_iso_with_milliseconds() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    assert format_time(moment) == "2026-01-02T03:04:05.678+00:00"
