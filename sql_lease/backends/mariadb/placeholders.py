"""Statement texts with numbered parameters (``?1``, ``?2``...) in the drivers' ``%s`` form.

The catalogue writes each parameter once by number, as the other backends do, and uses it as
often as the statement needs it; asyncmy and PyMySQL interpolate ``%s`` markers in order on the
client. `compiled` turns a text into that form once (cached) and says which argument fills each
marker: `arguments` builds the driver's tuple. A literal ``%`` is doubled. No I/O, no driver.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

__all__ = ["arguments", "compiled"]

_MARKER: Final = re.compile(r"\?(\d+)|%")


@lru_cache(maxsize=512)
def compiled(sql: str) -> tuple[str, tuple[int, ...]]:
    """``sql`` with ``%s`` markers, and the 0-based argument index of each marker in order."""
    order: list[int] = []

    def marker(match: re.Match[str]) -> str:
        if match.group(0) == "%":
            return "%%"
        order.append(int(match.group(1)) - 1)
        return "%s"

    return _MARKER.sub(marker, sql), tuple(order)


def arguments(order: tuple[int, ...], args: tuple[object, ...]) -> tuple[object, ...]:
    """The driver's arguments for a statement whose markers take ``order`` of ``args``."""
    return tuple([args[i] for i in order])
