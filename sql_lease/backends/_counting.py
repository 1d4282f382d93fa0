"""What every backend's counting statements share: the parameters, columns and decoders of the
five one-key statements (`sql_lease.catalogue.CountingStatements`), so a backend gives only its
statement texts and its several-key statements."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ..catalogue import (
    AllRow,
    CountingStatements,
    Statement,
    decode_count,
    decode_count_released,
)

__all__ = ["counting_statements"]

_COUNT_ROW: Final = ("owner", "slot_limit", "holders", "fence", "expires_at")
_METADATA: Final = ("metadata", "metadata_is_str")


def counting_statements(
    texts: tuple[str, str, str, str, str],
    *,
    released: tuple[str, ...] = ("released_at", "fence"),
    acquire_all: Callable[[int], Statement[AllRow]],
    release_all: Callable[[int], Statement[bytes]],
    keys_args: Callable[[list[bytes]], tuple[object, ...]],
    ensure: Callable[[int], Statement[bytes]] | None = None,
    blocker: Callable[[int], Statement[AllRow]] | None = None,
) -> CountingStatements:
    """The `CountingStatements` of the one-key statement ``texts`` (acquire, holders, release,
    renew, transfer; ``released``: the release's columns) and the several-key statements."""
    acquire, holders, release, renew, transfer = texts
    return CountingStatements(
        acquire=Statement(
            "count_acquire",
            acquire,
            ("key", "owner", "ttl_ms", "limit", *_METADATA),
            _COUNT_ROW,
            decode_count,
        ),
        holders=Statement("count_holders", holders, ("key",), _COUNT_ROW, decode_count),
        release=Statement(
            "count_release", release, ("key", "owner"), released, decode_count_released
        ),
        renew=Statement("count_renew", renew, ("key", "owner", "ttl_ms"), _COUNT_ROW, decode_count),
        transfer=Statement(
            "count_transfer",
            transfer,
            ("key", "from_owner", "to_owner", "ttl_ms", *_METADATA),
            _COUNT_ROW,
            decode_count,
        ),
        acquire_all=acquire_all,
        release_all=release_all,
        keys_args=keys_args,
        ensure=ensure,
        blocker=blocker,
    )
