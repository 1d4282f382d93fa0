"""The README's recipes for exclusive jobs (examples/recipes), run for real.

APScheduler (two schedulers in this process), Celery (two real worker processes on the Redis
broker), a Django management command and the cron script (two invocations at once each).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sql_lease import exclusive
from sql_lease.sync import SqlLeaseProvider

from ._events import eventually


def test_apscheduler_on_two_replicas_runs_each_tick_once(database_url: str) -> None:
    pytest.importorskip("apscheduler", reason="the test extra installs APScheduler")
    from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MISSED
    from apscheduler.schedulers.background import BackgroundScheduler

    ticks = 3
    ran: list[tuple[int, str]] = []
    fired: list[str] = []
    lock = threading.Lock()
    first = datetime.now().astimezone() + timedelta(seconds=2)
    replicas: list[tuple[BackgroundScheduler, SqlLeaseProvider]] = []
    name = f"aps-job-{first.timestamp()}"
    for replica in ("r1", "r2"):
        provider = SqlLeaseProvider.from_url(database_url)
        scheduler = BackgroundScheduler(timezone="UTC")

        # The recipe: decorate the job, schedule it on every replica.
        @exclusive(
            provider, name, at_most_for=timedelta(seconds=60), at_least_for=timedelta(seconds=0.5)
        )
        def job(tick: int, replica: str = replica) -> None:
            with lock:
                ran.append((tick, replica))

        def listen(event: Any, replica: str = replica) -> None:
            with lock:
                fired.append(replica)

        scheduler.add_listener(listen, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED)
        for tick in range(ticks):
            when = first + timedelta(seconds=tick)
            scheduler.add_job(job, "date", run_date=when, args=[tick], misfire_grace_time=30)
        replicas.append((scheduler, provider))
    try:
        for scheduler, _ in replicas:
            scheduler.start()
        eventually(lambda: len(fired) == 2 * ticks, "every replica firing every tick", 60)
    finally:
        for scheduler, provider in replicas:
            scheduler.shutdown(wait=True)
            provider.close()
    assert sorted(tick for tick, _ in ran) == list(range(ticks)), ran


# -- Celery: two real worker processes on the real Redis broker -------------------------------

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "examples" / "recipes"
REDIS = "redis://127.0.0.1:6379/3"


def _env(database_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SQL_LEASE_", "CELERY_"))}
    path = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env | {
        "SQL_LEASE_DATABASE_URL": database_url,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PATH": path,
        **extra,
    }


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_celery_task_on_two_workers_runs_each_tick_once(database_url: str, tmp_path: Path) -> None:
    pytest.importorskip("celery", reason="the test extra installs Celery")
    redis = pytest.importorskip("redis")
    try:
        redis.Redis.from_url(REDIS, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis is not reachable at {REDIS} ({exc}): start it (.ci/run does)")
    run = uuid.uuid4().hex[:8]
    # Each tick is delivered to both workers (as two beats would); a long at_least_for means
    # the copy a worker gets a little late is still skipped: the test frees the lease between
    # ticks instead of waiting out a minute.
    env = _env(
        database_url,
        CELERY_BROKER_URL=REDIS,
        CELERY_RESULT_BACKEND=REDIS,
        NIGHTLY_AT_LEAST_SECONDS="60",
    )
    names = [f"{w}-{run}@recipe" for w in ("a", "b")]
    logs = {name: tmp_path / f"{name}.log" for name in names}
    workers: list[subprocess.Popen[bytes]] = []
    for name in names:
        with logs[name].open("wb") as log:
            command = [
                *(sys.executable, "-m", "celery", "-A", "examples.recipes.celery_tasks"),
                *("worker", "--pool=solo", "-Q", f"q-{name}", "-n", name, "-l", "WARNING"),
                *("--without-gossip", "--without-mingle", "--without-heartbeat"),
            ]
            workers.append(
                subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            )
    from examples.recipes import celery_tasks  # the same module: its app and task names

    app = celery_tasks.app
    app.conf.broker_url = app.conf.result_backend = REDIS
    try:
        replied: set[str] = set()

        def both_up() -> bool:
            for reply in app.control.ping(destination=names, timeout=0.5):
                replied.update(reply)
            return replied == set(names)

        eventually(both_up, "both Celery workers answering", 90)
        with SqlLeaseProvider.from_url(database_url) as leases:
            leases.force_release("reports:nightly")
            for tick in range(3):
                sent = [celery_tasks.nightly.apply_async(queue=f"q-{name}") for name in names]
                got = [r.get(timeout=60) for r in sent]
                ran = [g for g in got if g is not None]
                assert len(ran) == 1 and ran[0].startswith("report built"), (tick, got)
                kept = leases.get_lease_owner("reports:nightly")
                assert kept is not None and kept.endswith(":at-least"), kept
                assert leases.force_release("reports:nightly")  # the next tick, a minute later
    finally:
        _stop(workers)
        app.close()
    for name, proc in zip(names, workers, strict=True):
        assert proc.returncode == 0, logs[name].read_text()


# -- Django: a management command invoked on two "replicas" at once ---------------------------


def test_django_command_invoked_twice_at_once_runs_once(database_url: str) -> None:
    pytest.importorskip("django", reason="the test extra installs Django")
    project = RECIPES / "django_project"
    with SqlLeaseProvider.from_url(database_url) as leases:
        leases.force_release("reports:nightly")
        procs = [
            subprocess.Popen(
                [sys.executable, "manage.py", "nightly_report"],
                cwd=project,
                env=_env(database_url, DJANGO_SETTINGS_MODULE="project.settings"),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outs = [p.communicate(timeout=120) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
        lines = sorted(out.strip() for out, _ in outs)
        assert lines[0].startswith("ran: report built"), lines
        assert lines[1].startswith("skipped: held by "), lines
        # The runner kept the lease for at_least_for: the same tick fired later still skips.
        again = subprocess.run(
            [sys.executable, "manage.py", "nightly_report"],
            cwd=project,
            env=_env(database_url),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert again.stdout.startswith("skipped"), (again.stdout, again.stderr)
        assert leases.force_release("reports:nightly")


# -- cron: the crontab line's script, fired twice at once -------------------------------------


def test_cron_script_fired_twice_at_once_runs_the_command_once(
    database_url: str, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    job = f"import os; open(os.path.join({str(runs)!r}, str(os.getpid())), 'w').close()"
    with SqlLeaseProvider.from_url(database_url) as leases:
        leases.force_release("reports:nightly")
        procs = [
            subprocess.Popen(
                ["sh", str(RECIPES / "cron_nightly.sh"), sys.executable, "-c", job],
                env=_env(database_url),
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        errs = [p.communicate(timeout=120)[1] for p in procs]
        assert [p.returncode for p in procs] == [0, 0], errs  # --skip-code 0: cron stays quiet
        assert len(list(runs.iterdir())) == 1, errs
        assert sum("skipped" in e for e in errs) == 1, errs
        assert leases.force_release("reports:nightly")  # kept for --at-least 1m
