"""What the journal costs per job: the happy path's operations, CPU (user, system) and wall time.

Run: .venv/bin/python benchmarks/journal_cost.py [--jobs 2000] [--concurrency 32]
     [--store postgresql://postgres@127.0.0.1:5432/shipping_bench] [--steady]

The journal of a run alone, without HTTP: ``--jobs`` jobs (cycled from
``examples/shipments.csv``) go through ``add``, ``claim``, ``begin_order`` (with the
quote's facts, as a run orders a job right after its quote, and its ``sending`` mark),
``record(ORDERED)``, ``record(WAYBILLED)`` and ``finish(DONE)`` in waves of
``--concurrency`` jobs, batched as a run batches them: one ``add`` and one ``claim`` per
wave (as the feed of ``bulk`` adds a chunk and the lane claims its free places), and each
write of a wave issued by its own task at once (so that the SQLite journal group-commits
them, the order intents too, as in a run whose orders are ready together). The store is
a SQLite file in a temporary folder (with its sent marks), or with ``--store
postgresql://...`` a fresh schema of that database (dropped afterwards). ``--steady`` puts the run's outage wrapper
(``SteadyJournal``) in front of it, as a run does.

CPU is the process's (``getrusage``: every thread, the SQLite writer included), in
microseconds per job; ``open`` is opening and closing the store. Figures move with the
machine's load: compare runs of one sitting.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import resource
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import date
from datetime import time as day_time
from decimal import Decimal
from pathlib import Path
from typing import Any

from shipping_async.bulk.jobs import ShipmentJob
from shipping_async.bulk.journal import JobFields, JobRecord, JobState
from shipping_async.bulk.readers import read_jobs

ROOT = Path(__file__).resolve().parents[1]
WORKER = "journal-cost"
LEASE = 60.0


@dataclass
class Cost:
    """What one operation cost over the whole run."""

    user: float = 0.0
    system: float = 0.0
    wall: float = 0.0
    calls: int = 0


class Meter:
    """Adds each measured step's rusage and wall time to its operation's :class:`Cost`."""

    def __init__(self) -> None:
        self.costs: dict[str, Cost] = {}

    async def measure(self, name: str, step: Callable[[], Awaitable[Any]]) -> Any:
        before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        value = await step()
        after, ended = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        cost = self.costs.setdefault(name, Cost())
        cost.user += after.ru_utime - before.ru_utime
        cost.system += after.ru_stime - before.ru_stime
        cost.wall += ended - started
        cost.calls += 1
        return value


def make_jobs(count: int, folder: Path) -> list[ShipmentJob]:
    """``count`` valid jobs, each with its own key, cycled from the example batch."""
    with (ROOT / "examples" / "shipments.csv").open(newline="") as source:
        template = list(csv.DictReader(source))
    path = folder / "batch.csv"
    run = uuid.uuid4().hex[:6]
    with path.open("w", newline="") as target:
        writer = csv.DictWriter(target, fieldnames=list(template[0]))
        writer.writeheader()
        for index in range(count):
            row = dict(template[index % len(template)])
            row["customer_reference"] = f"JC-{run}-{index:05d}"
            writer.writerow(row)
    jobs = [job for job in read_jobs(path) if isinstance(job, ShipmentJob)]
    assert len(jobs) == count, "the example batch has invalid rows"
    return jobs


async def open_store(spec: str) -> tuple[Any, Callable[[], Awaitable[None]]]:
    """The journal ``spec`` names, and what removes it afterwards."""
    from shipping_async.scaleout.factory import is_shared_journal, open_journal

    if not is_shared_journal(spec):
        return await open_journal(spec), _nothing
    schema = f"journal_cost_{uuid.uuid4().hex[:10]}"
    separator = "&" if "?" in spec else "?"
    journal = await open_journal(f"{spec}{separator}schema={schema}")

    async def drop() -> None:
        import asyncpg

        from shipping_async.scaleout.factory import split_options

        dsn, _ = split_options(spec, "schema")
        connection = await asyncpg.connect(dsn)
        try:
            await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await connection.close()

    return journal, drop


async def _nothing() -> None:
    return None


#: The writes of the happy path after the claim, in order: (name, one job's write).
Write = Callable[[Any, str, str, int], Awaitable[JobRecord]]
STEPS: list[tuple[str, Write]] = [
    ("begin_order", lambda journal, token, key, _: _intent(journal, token, key)),
    (
        "record ordered",
        lambda journal, token, key, order: journal.record(
            token, key, JobState.ORDERED, order_id=order
        ),
    ),
    (
        "record waybilled",
        lambda journal, token, key, order: journal.record(
            token, key, JobState.WAYBILLED, waybills=[f"WB{order}"], hub=False
        ),
    ),
    (
        "finish done",
        lambda journal, token, key, order: journal.finish(
            token,
            key,
            JobState.DONE,
            pickup_date=date(2030, 1, 2),
            pickup_from=day_time(9),
            pickup_to=day_time(12),
            pickup_confirmation=f"PU{order}",
        ),
    ),
]


#: The facts of the quote each job orders at once (written with its intent).
QUOTE: JobFields = {
    "carrier": "Sandbox Freight",
    "service": "Standard",
    "cost": Decimal("42.50"),
    "currency": "USD",
    "hub": False,
}


async def _intent(journal: Any, token: str, key: str) -> JobRecord:
    """The order intent with its quote, then its request's sent mark (as the send gate
    writes it)."""
    record: JobRecord = await journal.begin_order(
        token, key, quote_id=7, estimate_id=11, quote=QUOTE
    )
    journal.sending(key)
    return record


async def happy_path(journal: Any, jobs: list[ShipmentJob], width: int, meter: Meter) -> int:
    """Every job through the happy path, ``width`` at a time; how many ended ``DONE``."""
    done = 0
    for start in range(0, len(jobs), width):
        done += await _wave(journal, jobs[start : start + width], start, meter)
    return done


async def _wave(journal: Any, wave: list[ShipmentJob], first: int, meter: Meter) -> int:
    await meter.measure("add", lambda: journal.add(wave))
    keys = [job.key for job in wave]
    claimed: list[JobRecord] = await meter.measure(
        "claim", lambda: journal.claim(WORKER, lease=LEASE, limit=len(keys), keys=keys)
    )
    tokens = {record.key: record.claim_token for record in claimed}
    assert len(tokens) == len(wave), "a job of the wave was not claimed"
    records: list[JobRecord] = []
    for name, write in STEPS:
        # Each job's write from a task of its own, all at once: batched as in a run.
        records = await meter.measure(
            name,
            lambda write=write: asyncio.gather(
                *(
                    write(journal, tokens[key], key, first + index + 1)
                    for index, key in enumerate(keys)
                )
            ),
        )
    return sum(1 for record in records if record.state is JobState.DONE)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000, help="jobs (2000)")
    parser.add_argument("--concurrency", type=int, default=32, help="jobs per wave (32)")
    parser.add_argument("--store", default="", help="postgresql://... (default: a SQLite file)")
    parser.add_argument("--steady", action="store_true", help="behind the run's outage wrapper")
    args = parser.parse_args()
    meter = Meter()
    with tempfile.TemporaryDirectory(prefix="journal-cost-") as name:
        folder = Path(name)
        jobs = make_jobs(args.jobs, folder)
        spec = args.store or str(folder / "batch.journal")

        async def opening() -> Any:
            return await open_store(spec)

        journal, remove = await meter.measure("open + close", opening)
        store = journal
        if args.steady:
            from shipping_async.bulk._outage import steady

            journal = steady(journal)
        try:
            done = await happy_path(journal, jobs, args.concurrency, meter)
        finally:
            await meter.measure("open + close", store.close)
            await remove()
    kind = "PostgreSQL" if args.store else "SQLite file"
    print(
        f"{kind}{' behind SteadyJournal' if args.steady else ''}: {args.jobs} jobs "
        f"({done} done), waves of {args.concurrency}"
    )
    print("| operation | calls | user us/job | system us/job | CPU us/job | wall ms |")
    print("|---|---:|---:|---:|---:|---:|")
    total = Cost()
    for op, cost in meter.costs.items():
        total.user += cost.user
        total.system += cost.system
        total.wall += cost.wall
        total.calls += cost.calls
        print(_row(op, cost, args.jobs))
    print(_row("**total**", total, args.jobs))


def _row(name: str, cost: Cost, jobs: int) -> str:
    user, system = cost.user * 1e6 / jobs, cost.system * 1e6 / jobs
    return (
        f"| {name} | {cost.calls} | {user:.0f} | {system:.0f} | {user + system:.0f} "
        f"| {cost.wall * 1000:.0f} |"
    )


if __name__ == "__main__":
    from shipping_async.cli._loop import run

    run(main())  # the loop a run uses (uvloop when installed)
