"""What a PostgreSQL crash costs a batch: workers riding out two outages against none.

Run: .venv/bin/python benchmarks/store_outage.py [--n 120] [--speed 60] [--repeat 3]
Needs PostgreSQL's initdb/pg_ctl (a cluster of the benchmark's own on a free port, run
as the ``postgres`` user when root) and Redis on 127.0.0.1:6379.

Each run starts a ``shipping-async sandbox`` process at ``speed`` (a 60 s window lasts
60/speed real seconds), enqueues N jobs of one account and starts three ``worker``
processes sharing the journal and a Redis budget. In the ``two crashes`` rows the
benchmark crashes the cluster (``pg_ctl -m immediate stop``) once 20 and once 60 orders
exist, each time for one window, and starts it again. ``batch`` is the real time from
starting the workers to the last one's exit (process start-up included); ``span`` the
real time from the first order created to the last (the sandbox's log); ``away`` the
real time the store was down (crash to accepting connections again, its crash recovery
included); ``growth`` the span beyond the median span without an outage, against the
acceptance bound ``away + one window``; ``claimed again`` the jobs claimed more than once.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shipping_async.clock import ScaledClock
from shipping_async.scaleout.postgres_journal import PostgresJournal
from tests.scaleout import processes
from tests.scaleout.private_postgres import PrivatePostgres, _as_server_user, _chown_to_server_user
from tests.scaleout.processes import Workers, busiest_window, created, order_span, start_sandbox
from tests.scaleout.support import make_job

REDIS_URL = "redis://127.0.0.1:6379/0"


async def crash_for(server: PrivatePostgres, seconds: float) -> float:
    started = time.monotonic()
    await asyncio.to_thread(server.crash)
    await asyncio.sleep(seconds)
    await asyncio.to_thread(server.start)
    return time.monotonic() - started


async def measure(template: Path, n: int, speed: float, crashes: bool) -> dict[str, float]:
    processes.SPEED = speed
    window = 60.0 / speed
    server = PrivatePostgres(template)
    server.start()
    sandbox = start_sandbox("tok-north")
    try:
        journal = await PostgresJournal.open(server.dsn, clock=ScaledClock(speed))
        await journal.add([make_job(f"north-{i:04d}", "north") for i in range(n)])
        await journal.close()
        env = {"SHIPPING_ACCESS_TOKEN__NORTH": sandbox.token, "SHIPPING_BASE_URL": sandbox.base_url}
        with tempfile.TemporaryDirectory() as folder:
            crew = Workers(
                server.dsn, f"{REDIS_URL}?prefix=bench-{uuid.uuid4().hex[:10]}", env, Path(folder)
            )
            crew.extra = ("--concurrency", "20")
            started = time.monotonic()
            crew.start(3)
            away = 0.0
            try:
                if crashes:
                    await sandbox.wait_for_orders(20, within=60)
                    away += await crash_for(server, window)
                    await sandbox.wait_for_orders(60, within=60)
                    away += await crash_for(server, window)
                codes = await crew.wait(within=180)
            finally:
                crew.stop()
            batch = time.monotonic() - started
            tracebacks = crew.logs().count("Traceback")
        journal = await PostgresJournal.open(server.dsn, clock=ScaledClock(speed))
        reclaimed = sum([record.attempts > 1 async for record in journal.records()])
        await journal.close()
        orders = await sandbox.orders()
        made = created(orders)
        return {
            "batch": batch,
            "span": order_span(orders) / speed,
            "away": away,
            "twice": sum(count > 1 for count in made.values()),
            "missing": n - len(made),
            "429": [record["status"] for record in orders].count(429),
            "busiest": busiest_window(orders),
            "exit0": sum(code == 0 for code in codes),
            "tracebacks": tracebacks,
            "reclaimed": reclaimed,
        }
    finally:
        sandbox.stop()
        server.cleanup()


def make_template() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="pg-template-"))
    _chown_to_server_user(folder)
    data = folder / "data"
    _as_server_user("initdb", "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
    return data


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=120)
    parser.add_argument("--speed", type=float, default=60.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    window = 60.0 / args.speed
    template = make_template()
    rows: list[tuple[str, dict[str, float]]] = []
    for _ in range(args.repeat):
        for crashes in (False, True):
            result = await measure(template, args.n, args.speed, crashes)
            rows.append(("two crashes" if crashes else "no outage", result))
    base = statistics.median(r["span"] for name, r in rows if name == "no outage")
    print(f"{args.n} jobs, 3 workers, one account, window {window:.2f} s real")
    print(
        f"{'run':<12} {'batch s':>8} {'span s':>7} {'away s':>7} {'growth s':>9} {'bound s':>8} "
        f"{'twice':>6} {'missing':>8} {'429':>4} {'busiest':>8} {'exit 0':>7} {'tracebacks':>11} {'claimed again':>14}"
    )
    for name, r in rows:
        growth = r["span"] - base
        bound = r["away"] + window if r["away"] else 0.0
        print(
            f"{name:<12} {r['batch']:>8.1f} {r['span']:>7.1f} {r['away']:>7.1f} {growth:>9.1f} {bound:>8.1f} "
            f"{r['twice']:>6.0f} {r['missing']:>8.0f} {r['429']:>4.0f} {r['busiest']:>8.0f} "
            f"{r['exit0']:>5.0f}/3 {r['tracebacks']:>11.0f} {r['reclaimed']:>14.0f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
