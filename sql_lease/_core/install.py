"""How to install sql-lease with an extra, said in one place for every message that says it.

Neither package is published yet, so the hint gives the route that works today (pip from the
git repository, or a wheel built from a checkout) instead of ``pip install 'sql-lease[...]'``,
which finds nothing on PyPI. After the first release this becomes the plain PyPI line.
"""

from __future__ import annotations

__all__ = ["PUBLISHED", "pip_install"]

#: False until a release is on PyPI: the hints then name the git route instead.
PUBLISHED = False
#: Where pip finds the source today; ``<host>/<owner>`` is the repository you cloned from.
REPOSITORY = "git+https://<host>/<owner>/sql_lease.git"


def pip_install(extras: str) -> str:
    """The command that installs sql-lease with ``extras`` (e.g. ``"cli"``), and how to read it."""
    if PUBLISHED:
        return f"pip install 'sql-lease[{extras}]'"
    return (
        f"pip install 'sql-lease[{extras}] @ {REPOSITORY}' (not on PyPI yet: use the repository "
        f"you cloned, or pip install '.[{extras}]' in a checkout)"
    )
