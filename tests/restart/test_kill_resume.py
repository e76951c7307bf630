"""SIGKILLed ``shipping-async bulk`` runs, resumed until done, judged by the sandbox's log.

Each test runs the example batch (60 jobs) as real processes against a sandbox at speed
20 (the 60 s window lasts 3 real seconds, longer than a process takes to start, so a
restarted run's first orders would land in the window the killed one filled) and kills
it three times, each at a seeded random moment: just after the first run's first burst of
orders (so the restart meets a full window: without the limiter's memory this gets 20
or more 429s), within one window after the restarted run's first order, and inside a 429
pause. See ``harness.py`` for how each figure is read from the
sandbox's request log; ``benchmarks/kill_resume.py`` runs 20 such cycles.
"""

from __future__ import annotations

from pathlib import Path

from tests.restart.harness import Cycle, run_cycle
from tests.scaleout.conftest import POSTGRES_DSN, REDIS_URL

SPEED = 20.0
PLAN = ("burst", "early", "pause")


def assert_exactly_once_without_restart_429s(cycle: Cycle) -> None:
    assert cycle.kills, "at least one run was killed"
    assert cycle.duplicates == 0, cycle.created.most_common(3)
    assert cycle.lost == []
    assert cycle.restart_429s == 0
    assert cycle.other_429s == 0
    # A job left unknown had its POST /orders on the wire when its process died, read
    # from the sandbox's log alone: its last POST /orders reached the server and nothing
    # used the answer. A kill while the intent's commit was being fsynced (before the
    # first byte) is told apart by the journal's sent marks, and the job is sent again;
    # a job that waited (a 429 pause, the limiter's queue) with its intent fails here.
    assert cycle.unknown_not_on_wire == [], cycle.unknown_not_on_wire
    assert set(cycle.statuses) == set(cycle.created)
    assert {cycle.statuses[key] for key in cycle.statuses} <= {"done", "unknown"}


async def test_killed_sqlite_runs_resume_to_each_job_ordered_once_without_restart_429s(
    tmp_path: Path,
) -> None:
    cycle = await run_cycle(13, tmp_path, plan=PLAN, speed=SPEED)

    assert_exactly_once_without_restart_429s(cycle)


async def test_killed_postgres_redis_runs_resume_to_each_job_ordered_once(
    tmp_path: Path, pg_schema: str, prefix: str, redis_client: object
) -> None:
    cycle = await run_cycle(
        17,
        tmp_path,
        journal=f"{POSTGRES_DSN}?schema={pg_schema}",
        limiter=f"{REDIS_URL}?prefix={prefix}",
        plan=PLAN,
        speed=SPEED,
    )

    assert_exactly_once_without_restart_429s(cycle)
