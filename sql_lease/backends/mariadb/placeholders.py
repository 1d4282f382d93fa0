"""Statement texts with numbered parameters (``?1``, ``?2``...) in the drivers' ``%s`` form.

The catalogue writes each parameter once by number, as the other backends do, and uses it as
often as the statement needs it; asyncmy and PyMySQL interpolate ``%s`` markers in order on the
client. `compiled` turns a text into that form once (cached) and says which argument fills each
marker; `bound` gives the text with a getter that builds the driver's tuple in one C call. A
literal ``%`` is doubled. No I/O, no driver.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from operator import itemgetter
from typing import Final

__all__ = ["Bind", "bound", "compiled"]

_MARKER: Final = re.compile(r"\?(\d+)|%")

#: The driver's arguments of a statement, from the call's (numbered) arguments.
Bind = Callable[[tuple[object, ...]], tuple[object, ...]]


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


@lru_cache(maxsize=512)
def bound(sql: str) -> tuple[str, Bind]:
    """`compiled`'s text, and a getter making the driver's arguments of a call (each
    marker's argument, in marker order) with no Python loop: an `operator.itemgetter` of the
    markers' indexes (a slice when the markers take the arguments in order, or take one:
    always a tuple)."""
    text, order = compiled(sql)
    getter: Bind
    if order == tuple(range(len(order))):
        getter = itemgetter(slice(0, len(order)))  # the arguments themselves, in order
    elif len(order) == 1:
        getter = itemgetter(slice(order[0], order[0] + 1))
    else:
        getter = itemgetter(*order)
    return text, getter
