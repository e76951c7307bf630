"""The shared stores alone: CPU per job of the PostgreSQL journal and the Redis limiter.

Run: .venv/bin/python benchmarks/shared_stores_cost.py [--jobs 2000] [--accounts 50]
     [--concurrency 64] [--latency 0.002] [--only journal,limiter] [--repeat 3]
Needs PostgreSQL on 127.0.0.1:5432 (user postgres) and ``redis-server`` on the PATH.

What a worker's job asks of the two stores, without HTTP: ``--jobs`` jobs of ``--accounts``
accounts are enqueued into a fresh schema of the database ``shipping_bench`` (not
measured); then, measured, ``--concurrency`` tasks claim them (one claim for many
accounts, at most twice the concurrency held, as the worker does) and take each through
a job's journal writes and its order permit, in a job's order:

    order gate admits -> quote (sleep) -> limiter.acquire -> begin_order (the intent,
    alone, with the quote's facts) -> POST /orders (sleep) ->
    limiter.release(sent=True) -> record ORDERED -> waybill (sleep) -> record WAYBILLED ->
    availabilities + booking (2 sleeps) -> finish DONE

Each "request" is an ``asyncio.sleep(--latency)``. The limiter is one
``RedisOrderLimiter`` per account (20 per 60 s on a clock at ``--speed``, so the bound is
accounts x 20 x speed / 60 orders/s) with the pipeline's ``OrderGate`` attached, on a
private ``redis-server``. ``--only journal`` leaves the limiter out (the gate admits at
once), ``--only limiter`` the journal (the writes are skipped), ``--only none`` both: its
CPU is the harness's own, to subtract.

Columns: ``CPU us/job`` = user + system CPU of this process over the measured phase per
job (not start-up: see ``python -X importtime -m shipping_async worker``); ``PG xact/job``
from ``pg_stat_database``; ``PG stmt/job`` = statements the journal sent (asyncpg
``_execute``/``executemany`` calls counted); ``Redis cmd/job`` and ``scripts/job`` from
``INFO commandstats``. Several ``--repeat`` runs print one row each (take the median).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import asyncpg
import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _bench_stores import (  # noqa: E402  (this folder is first on sys.path)
    BENCH_DSN,
    drop_schema,
    ensure_database,
    private_redis,
    transactions,
    write_batch,
)

from shipping_async.bulk._gate import OrderGate  # noqa: E402
from shipping_async.bulk._places import Signal  # noqa: E402
from shipping_async.bulk.journal import JobFields, JobRecord, JobState  # noqa: E402
from shipping_async.bulk.readers import read_jobs  # noqa: E402
from shipping_async.clock import ScaledClock  # noqa: E402
from shipping_async.limiter import OrderLimiter, RollingWindowLimiter  # noqa: E402
from shipping_async.scaleout.postgres_journal import PostgresJournal  # noqa: E402
from shipping_async.scaleout.redis_limiter import RedisOrderLimiter  # noqa: E402

LIMIT, WINDOW = 20, 60.0
LEASE = 10.0


@dataclass
class Result:
    cpu_us: float
    seconds: float
    xacts: float
    statements: float
    redis_calls: float
    scripts: float


class _Counted:
    """Counts the statements asyncpg sends (a wrapper around its two entry points)."""

    statements = 0

    @classmethod
    def install(cls) -> None:
        for name in ("_execute", "_executemany"):
            original = getattr(asyncpg.Connection, name)

            def counting(self: Any, *args: Any, __original: Any = original, **kw: Any) -> Any:
                cls.statements += 1
                return __original(self, *args, **kw)

            setattr(asyncpg.Connection, name, counting)


#: The facts of the quote each job orders at once (written with its intent).
QUOTE: JobFields = {
    "carrier": "DHL",
    "service": "Express",
    "cost": Decimal("12.34"),
    "currency": "EUR",
    "hub": False,
}


class _NoJournal:
    """``--only limiter``: writes that do nothing (the records are the claimed ones)."""

    async def record(self, token: str, key: str, state: JobState, **fields: Any) -> None:
        return None

    finish = record

    async def begin_order(self, token: str, key: str, **fields: Any) -> None:
        return None


async def run_once(args: argparse.Namespace, spec: str, redis_url: str) -> Result:
    kinds = set(args.only.split(","))
    clock = ScaledClock(args.speed)
    journal = await PostgresJournal.open(spec, schema=args.schema)
    writer: Any = journal if "journal" in kinds else _NoJournal()
    limiters: dict[str, OrderLimiter] = {}
    gates: dict[str, OrderGate] = {}
    stop = Signal()  # the runner's stop event
    redis = aioredis.Redis.from_url(redis_url)
    await redis.flushall()
    await redis.config_resetstat()
    before_x = await transactions()
    before_s = _Counted.statements

    def gate_of(account: str) -> OrderGate:
        gate = gates.get(account)
        if gate is None:
            if "limiter" in kinds:
                limiter: OrderLimiter = RedisOrderLimiter(
                    redis_url, account=account, lease=LEASE * args.speed, clock=clock
                )
            else:
                limiter = RollingWindowLimiter(1_000_000, 1.0, clock=clock)
            limiters[account] = limiter
            gate = gates[account] = OrderGate(limiter, clock, stop)
        return gate

    queue: asyncio.Queue[JobRecord | None] = asyncio.Queue()
    held = 0
    claiming = asyncio.Lock()
    worker = f"bench-{uuid.uuid4().hex[:6]}"
    exhausted = False

    async def claim_more() -> None:
        nonlocal held, exhausted
        async with claiming:
            if exhausted or queue.qsize() > 0:
                return
            room = 2 * args.concurrency - held
            if room <= 0:
                return
            claimed = await journal.claim(worker, lease=LEASE, limit=room)
            if not claimed:
                exhausted = True
                for _ in range(args.concurrency):
                    queue.put_nowait(None)
                return
            held += len(claimed)
            for record in claimed:
                queue.put_nowait(record)

    async def request() -> None:
        await asyncio.sleep(args.latency)

    async def ship(record: JobRecord) -> None:
        nonlocal held
        token, key = record.claim_token, record.key
        assert token is not None
        gate = gate_of(record.account)
        limiter = limiters[record.account]
        await gate.admit()
        await request()  # the quote
        gate.sending()
        permit = await limiter.acquire()
        await writer.begin_order(token, key, quote_id=1000, estimate_id=2000, quote=QUOTE)
        await request()  # POST /orders
        await limiter.release(permit, sent=True)
        gate.poke()
        await writer.record(token, key, JobState.ORDERED, order_id=3000)
        await request()  # the waybill
        await writer.record(token, key, JobState.WAYBILLED, waybills=["WB1"], hub=False)
        await request()  # availabilities
        await request()  # booking
        await writer.finish(
            token,
            key,
            JobState.DONE,
            pickup_confirmation="PU-1",
            pickup_date=clock.now().date(),
            pickup_from=clock.now().time().replace(hour=9, minute=0, second=0, microsecond=0),
            pickup_to=clock.now().time().replace(hour=17, minute=0, second=0, microsecond=0),
        )
        held -= 1

    async def lane() -> None:
        while True:
            if queue.empty():
                await claim_more()
            record = await queue.get()
            if record is None:
                return
            await ship(record)

    started_usage = resource.getrusage(resource.RUSAGE_SELF)
    started = time.monotonic()
    async with asyncio.TaskGroup() as tasks:
        for _ in range(args.concurrency):
            tasks.create_task(lane())
    seconds = time.monotonic() - started
    for limiter in limiters.values():
        aclose = getattr(limiter, "aclose", None)
        if aclose is not None:
            await aclose()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (usage.ru_utime - started_usage.ru_utime) + (usage.ru_stime - started_usage.ru_stime)
    statements = _Counted.statements - before_s
    await journal.close()
    stats = await redis.info("commandstats")
    await redis.aclose()
    calls = {name: int(value["calls"]) for name, value in stats.items()}
    redis_calls = sum(calls.values()) - calls.get("cmdstat_info", 0)
    redis_calls -= calls.get("cmdstat_flushall", 0) + calls.get("cmdstat_config|resetstat", 0)
    scripts = sum(v for k, v in calls.items() if "eval" in k or "fcall" in k)
    xacts = await transactions() - before_x
    jobs = args.jobs
    return Result(
        cpu * 1e6 / jobs,
        seconds,
        xacts / jobs,
        statements / jobs,
        redis_calls / jobs,
        scripts / jobs,
    )


async def enqueue(spec: str, schema: str, batch: Path) -> None:
    journal = await PostgresJournal.open(spec, schema=schema)
    try:
        jobs = [job for job in read_jobs(batch) if not hasattr(job, "error")]
        for start in range(0, len(jobs), 500):
            await journal.add(jobs[start : start + 500])  # type: ignore[arg-type]
    finally:
        await journal.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--accounts", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=64, help="jobs in flight at once")
    parser.add_argument("--latency", type=float, default=0.002, help="seconds per 'request'")
    parser.add_argument("--speed", type=float, default=60.0, help="the limiter's clock speed")
    parser.add_argument("--only", default="journal,limiter", help="journal, limiter, none")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    _Counted.install()
    await ensure_database()
    print(
        f"{args.jobs} jobs, {args.accounts} accounts, {args.concurrency} at once, "
        f"{args.latency * 1000:g} ms per request, limiter clock x{args.speed:g}; "
        f"--only {args.only}"
    )
    print("| run | jobs/s | CPU us/job | PG xact/job | PG stmt/job | Redis cmd/job | scripts/job |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        batch = folder / "batch.csv"
        write_batch(batch, args.accounts, args.jobs, prefix="SC")
        with private_redis(folder) as redis_url:
            for run in range(1, args.repeat + 1):
                args.schema = f"cost_{uuid.uuid4().hex[:10]}"
                await enqueue(BENCH_DSN, args.schema, batch)
                try:
                    result = await run_once(args, BENCH_DSN, redis_url)
                finally:
                    await drop_schema(args.schema)
                print(
                    f"| {run} | {args.jobs / result.seconds:,.0f} | {result.cpu_us:,.0f} "
                    f"| {result.xacts:.2f} | {result.statements:.2f} "
                    f"| {result.redis_calls:.2f} | {result.scripts:.2f} |",
                    flush=True,
                )


def _loop_factory() -> Any:
    if os.environ.get("SHIPPING_EVENT_LOOP", "").lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


if __name__ == "__main__":
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(main())
