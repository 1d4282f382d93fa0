"""Reading command-line values: durations and keys or owners written with escapes.

Pure functions (no click), so they are unit-tested directly and reused by the click types.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = ["parse_duration_ms", "unescape"]

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*", re.IGNORECASE)
_SIMPLE = {
    "\\": "\\",
    "'": "'",
    '"': '"',
    "0": "\0",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
}
_HEX_DIGITS = {"x": 2, "u": 4, "U": 8}


def parse_duration_ms(text: str, *, minimum: int = 1, maximum: int | None = None) -> int:
    """``500ms``, ``15s``, ``1.5s``, ``2m``, ``1h``, ``1d`` as whole milliseconds, from
    ``minimum`` to ``maximum``.

    Raises `ValueError` with a message fit for the user (a limit in the unit they wrote).
    """
    match = _DURATION.fullmatch(text)
    if match is None:
        raise ValueError(
            f"{text!r} is not a duration: write a number and a unit, like 500ms, 15s, 2m"
        )
    try:
        millis = Decimal(match.group(1)) * _UNITS[match.group(2).lower()]
    except InvalidOperation:  # pragma: no cover - the pattern admits only plain decimals
        raise ValueError(f"{text!r} is not a duration") from None
    if millis != millis.to_integral_value():
        raise ValueError(f"{text!r} is not a whole number of milliseconds")
    if millis < minimum:
        raise ValueError(f"{text!r} is too short: at least {minimum}ms")
    if maximum is not None and millis > maximum:
        limit = Decimal(maximum) / _UNITS[match.group(2).lower()]
        raise ValueError(f"{text!r} is too long: at most {limit.normalize():f}{match.group(2)}")
    return int(millis)


def unescape(text: str) -> str:
    r"""Decode Python-style escapes: ``\0`` ``\xHH`` ``\uHHHH`` ``\UHHHHHHHH`` ``\n`` ``\\`` ...

    ``\0`` is always NUL, even before a digit (no octal escapes), so Mastra's thread keys
    ``resource\0123`` read as written. Any other backslash sequence is an error (write ``\\``
    for a backslash), so a typo never silently becomes a different key.
    """
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\":
            out.append(char)
            i += 1
            continue
        if i + 1 >= len(text):
            raise ValueError("ends with a lone backslash (write \\\\ for a backslash)")
        code = text[i + 1]
        if code in _SIMPLE:
            out.append(_SIMPLE[code])
            i += 2
            continue
        width = _HEX_DIGITS.get(code)
        if width is None:
            raise ValueError(
                f"unknown escape \\{code} (known: \\0 \\xHH \\uHHHH \\n \\t; \\\\ is a backslash)"
            )
        digits = text[i + 2 : i + 2 + width]
        if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
            raise ValueError(f"\\{code} needs exactly {width} hex digits")
        value = int(digits, 16)
        if value > 0x10FFFF:
            raise ValueError(f"\\{code}{digits} is beyond the last Unicode code point")
        out.append(chr(value))
        i += 2 + width
    return "".join(out)
