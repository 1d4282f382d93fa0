"""What ``sql-lease top`` makes of successive snapshots (pure: no database, no terminal)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sql_lease.catalogue import LeaseState
from sql_lease.cli._top_view import Changes, by_class, view_fields

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WINDOW = timedelta(minutes=1)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def state(
    key: str,
    owner: str,
    fence: int,
    acquired: float,
    expires: float,
    now: float,
    wanted: float | None = None,
) -> LeaseState:
    return LeaseState(
        key,
        owner,
        fence,
        at(expires),
        at(acquired),
        None if wanted is None else at(wanted),
        at(now),
    )


def test_the_first_snapshot_tells_what_its_timestamps_say() -> None:
    changes = Changes()
    changes.update([state("a", "w1", 1, -120, 30, 0), state("b", "w2", 2, -10, -5, 0)], WINDOW)
    assert [(c.key, c.what) for c in changes.recent] == [("b", "ended"), ("b", "acquired")]


def test_later_snapshots_tell_what_changed() -> None:
    changes = Changes()
    changes.update(
        [
            state("a", "w1", 1, 0, 30, 1),
            state("b", "w2", 2, 0, 30, 1),
            state("c", "w3", 3, 0, 30, 1),
        ],
        timedelta(0),
    )
    assert list(changes.recent) == []
    changes.update(
        [
            state("a", "w9", 4, 2, 40, 3),  # another owner, another fence
            state("b", "w2", 2, 0, 2.5, 3),  # expiry moved earlier: released
            state("c", "w3", 3, 0, 30, 3, wanted=20),  # now wanted
            state("d", "w4", 5, 2.8, 30, 3),  # new
        ],
        WINDOW,
    )
    assert {(c.key, c.what, c.owner, c.fence) for c in changes.recent} == {
        ("a", "handed over", "w9", 4),
        ("b", "released", "w2", 2),
        ("c", "wanted", "w3", 3),
        ("d", "acquired", "w4", 5),
    }
    changes.update([state("a", "w9", 4, 2, 60, 50)], WINDOW)  # d gone from view, c too
    assert {(c.key, c.what) for c in list(changes.recent)[:2]} == {("c", "ended"), ("d", "ended")}


def test_an_expiry_is_not_a_release() -> None:
    changes = Changes()
    changes.update([state("a", "w1", 1, 0, 10, 5)], timedelta(0))
    changes.update([state("a", "w1", 1, 0, 10, 11)], WINDOW)
    assert [(c.key, c.what, c.at) for c in changes.recent] == [("a", "expired", at(10))]


def test_classes_hide_keys() -> None:
    states = [
        state("import:1", "a", 1, 0, 30, 5),
        state("import:2", "b", 2, 0, 3, 5, wanted=9),
        state("mail", "c", 3, 1, 30, 5),
    ]
    changes = Changes()
    changes.update(states, WINDOW)
    doc = view_fields(states, changes, at(5), by_class(":"))
    assert doc["classes"] == [
        {"class": "import", "held": 1, "wanted": 1, "ended": 1, "longest_held_ms": 5000},
        {"class": "mail", "held": 1, "wanted": 0, "ended": 0, "longest_held_ms": 4000},
    ]
    assert {c["class"] for c in doc["changes"]} == {"import", "mail"}
    assert "leases" not in doc and all("key" not in c for c in doc["changes"])


def test_the_holders_of_a_counting_lease_change_one_by_one() -> None:
    changes = Changes()
    changes.update([state("p", "w1", 1, 0, 30, 1), state("p", "w2", 2, 0, 30, 1)], timedelta(0))
    changes.update(
        [
            state("p", "w1", 1, 0, 30, 2),
            state("p", "w2", 2, 0, 30, 2),
            state("p", "w3", 3, 2, 30, 2),
        ],
        WINDOW,
    )  # a third holder joins; the others stay
    assert [(c.key, c.what, c.owner) for c in changes.recent] == [("p", "acquired", "w3")]
    changes.update([state("p", "w1", 1, 0, 30, 3), state("p", "w3", 3, 2, 30, 3)], WINDOW)
    assert [(c.key, c.what, c.owner) for c in changes.recent] == [
        ("p", "ended", "w2"),
        ("p", "acquired", "w3"),
    ]
