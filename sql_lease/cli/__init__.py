"""The ``sql-lease`` command line (``python -m sql_lease``); needs the ``cli`` extra.

Installed with the ``cli`` extra (click and rich; `sql_lease._core.install.pip_install` says how),
which the core library does not require. `main` is the console script's entry point.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn

from .._core.install import pip_install

__all__ = ["main"]

_EXTRA = f"the sql-lease command line needs click and rich: {pip_install('cli')}"


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Run ``sql-lease`` and exit with its exit code."""
    try:
        from ._app import run
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in {"click", "rich"}:
            raise
        print(f"sql-lease: error: {_EXTRA} ({missing} is missing)", file=sys.stderr)
        sys.exit(2)
    sys.exit(run(argv))
