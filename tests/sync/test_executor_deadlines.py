"""The sync executors' watchdog (`backends._thread_deadlines`), without a database.

Calls are simulated by threads that block on an Event: `on_expire` sets it (as a statement
cancel would end the blocked call). No test waits on a clock to decide; deadlines are either
long past (must fire) or far away (must not).
"""

from __future__ import annotations

import random
import threading
from time import monotonic
from typing import Any

from sql_lease.backends._thread_deadlines import Deadlines

FAR = 3_600.0  # a deadline that never comes during a test
WAIT = 30.0  # upper bound for event waits (a hung watchdog fails instead of hanging)


def _release(arg: Any, ended: threading.Event) -> None:
    interrupted, got_ended = arg
    got_ended.append(ended)
    interrupted.set()


def test_a_call_past_its_deadline_is_interrupted_once_and_told_so() -> None:
    d = Deadlines()
    interrupted = threading.Event()
    ends: list[threading.Event] = []
    call = d.start(monotonic() + 0.05, _release, (interrupted, ends))
    assert interrupted.wait(WAIT)
    assert len(ends) == 1 and not ends[0].is_set()
    assert d.finish(call) is True
    assert ends[0].is_set()  # the interrupter's second step can tell the call has returned
    d.close()


def test_a_call_that_ends_in_time_is_never_interrupted() -> None:
    d = Deadlines()
    interrupted = threading.Event()
    for _ in range(1_000):
        call = d.start(monotonic() + FAR, _release, (interrupted, []))
        assert d.finish(call) is False
    # A call with a close deadline after many far ones: the watchdog (asleep until a far
    # deadline) must be woken for it.
    stuck = threading.Event()
    call = d.start(monotonic() + 0.05, _release, (stuck, []))
    assert stuck.wait(WAIT)
    assert d.finish(call) is True
    assert not interrupted.is_set()
    d.close()


def test_the_watchdog_is_one_thread_that_outlives_single_calls() -> None:
    d = Deadlines()
    before = {t.ident for t in threading.enumerate() if t.name == "sql_lease deadlines"}
    for _ in range(200):
        d.finish(d.start(monotonic() + FAR, _release, (threading.Event(), [])))
    mine = [
        t
        for t in threading.enumerate()
        if t.name == "sql_lease deadlines" and t.ident not in before
    ]
    assert len(mine) == 1
    d.close()  # idle and closed: the thread ends
    mine[0].join(WAIT)
    assert not mine[0].is_alive()
    # Calls after close still have a watchdog.
    stuck = threading.Event()
    call = d.start(monotonic() + 0.01, _release, (stuck, []))
    assert stuck.wait(WAIT)
    assert d.finish(call) is True


def test_many_threads_each_stuck_call_interrupted_exactly_once() -> None:
    d = Deadlines()
    fired: dict[int, int] = {}
    lock = threading.Lock()
    errors: list[str] = []

    def on_expire(arg: Any, ended: threading.Event) -> None:
        key, wake = arg
        with lock:
            fired[key] = fired.get(key, 0) + 1
        wake.set()

    def worker(w: int) -> None:
        rng = random.Random(w)
        for i in range(300):
            key = w * 1_000 + i
            wake = threading.Event()
            stuck = rng.random() < 0.05
            # Stuck calls have a deadline that has passed or is about to; the others a far one.
            deadline = monotonic() + (rng.choice((-1.0, 0.0, 0.002)) if stuck else FAR)
            call = d.start(deadline, on_expire, (key, wake))
            if stuck and not wake.wait(WAIT):
                errors.append(f"call {key} was never interrupted")
            interrupted = d.finish(call)
            if interrupted is not stuck:
                errors.append(f"call {key}: stuck={stuck} but finish said {interrupted}")

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert fired and set(fired.values()) == {1}
    d.close()
