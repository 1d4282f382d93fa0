"""Showing keys, owners, durations and times: unambiguous, and pasteable back as input."""

from __future__ import annotations

from datetime import datetime

__all__ = ["escape", "format_duration", "format_time"]

_NAMED = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape(text: str) -> str:
    r"""``text`` with backslashes doubled and every unprintable character escaped.

    NUL shows as ``\x00`` (unambiguous before a digit); the result reads back through
    `unescape` to the same string. Printable non-ASCII characters are kept as they are.
    """
    out: list[str] = []
    for char in text:
        if char in _NAMED:
            out.append(_NAMED[char])
        elif char.isprintable():
            out.append(char)
        else:
            point = ord(char)
            if point < 0x100:
                out.append(f"\\x{point:02x}")
            elif point < 0x10000:
                out.append(f"\\u{point:04x}")
            else:
                out.append(f"\\U{point:08x}")
    return "".join(out)


def format_duration(millis: float) -> str:
    """A short human duration: ``850ms``, ``14.2s``, ``2m03s``, ``1h02m``, ``3d04h``."""
    if millis < 0:
        return "-" + format_duration(-millis)
    if millis < 1000:
        return f"{millis:.0f}ms"
    seconds = millis / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def format_time(moment: datetime) -> str:
    """A database time in ISO 8601 with milliseconds (as the database reported its zone)."""
    return moment.isoformat(timespec="milliseconds")
