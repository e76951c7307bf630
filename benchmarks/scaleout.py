"""Many workers, one budget: order span against the bound and 429s, by workers and accounts.

Run: .venv/bin/python benchmarks/scaleout.py [--n 120] [--speed 20] [--repeat 3]
Needs Redis on 127.0.0.1:6379 and PostgreSQL on 127.0.0.1:5432 (user postgres, db test).

Each row starts one ``shipping-async sandbox`` process per account (its own token and
20-per-60 s budget, at ``speed``), enqueues N jobs per account in a fresh journal schema,
then starts W ``shipping-async worker`` processes sharing the journal and a fresh Redis
prefix. From each sandbox's request log: the order span (first to last order created,
sandbox seconds) against the bound ``60 * (ceil(N/20) - 1)``, the 429s, the busiest
window. ``batch`` runs from the first request the sandbox saw to the last (quotes,
orders, waybills, pickups; sandbox seconds; the slowest account). ``orders per window``
is all accounts' orders per 60 sandbox seconds: one account can do 20, four accounts
80. ``wall`` is the real time from starting the workers to the last one's exit,
process start-up included (on two cores, four workers start more slowly than one).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg
import redis.asyncio as aioredis

from shipping_async.clock import ScaledClock
from shipping_async.scaleout.postgres_journal import PostgresJournal
from tests.scaleout import processes
from tests.scaleout.processes import Workers, busiest_window, created, order_span, start_sandbox
from tests.scaleout.support import make_job

POSTGRES_DSN = "postgresql://postgres@127.0.0.1:5432/test"
REDIS_URL = "redis://127.0.0.1:6379/0"


async def measure(accounts: int, workers: int, n: int, speed: float) -> dict[str, float]:
    processes.SPEED = speed
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    prefix = f"bench-{uuid.uuid4().hex[:10]}"
    names = [f"acct{index}" for index in range(accounts)]
    sandboxes = [start_sandbox(f"tok-{name}") for name in names]
    journal = await PostgresJournal.open(POSTGRES_DSN, schema=schema, clock=ScaledClock(speed))
    try:
        for name in names:
            await journal.add([make_job(f"{name}-{i:04d}", name) for i in range(n)])
        env: dict[str, str] = {}
        for name, sandbox in zip(names, sandboxes, strict=True):
            env[f"SHIPPING_ACCESS_TOKEN__{name.upper()}"] = sandbox.token
            env[f"SHIPPING_BASE_URL__{name.upper()}"] = sandbox.base_url
        with tempfile.TemporaryDirectory() as folder:
            crew = Workers(
                f"{POSTGRES_DSN}?schema={schema}",
                f"{REDIS_URL}?prefix={prefix}",
                env,
                Path(folder),
            )
            started = time.monotonic()
            crew.start(workers)
            codes = await crew.wait(within=600)
            wall = time.monotonic() - started
            if codes != [0] * workers:
                raise SystemExit(f"workers failed: {codes}\n{crew.logs()}")
        spans, batches, too_many, busiest, total = [], [], 0, 0, 0
        for sandbox in sandboxes:
            every = [record["monotonic"] for record in await sandbox.requests()]
            batches.append(max(every) - min(every))
            orders = await sandbox.orders()
            made = created(orders)
            if len(made) != n or max(made.values()) != 1:
                raise SystemExit("lost or duplicated orders")
            spans.append(order_span(orders))
            too_many += [record["status"] for record in orders].count(429)
            busiest = max(busiest, busiest_window(orders))
            total += len(made)
    finally:
        for sandbox in sandboxes:
            sandbox.stop()
        await journal.close()
        await _drop(schema, prefix)
    bound = 60 * (math.ceil(n / 20) - 1)
    span = max(spans)
    return {
        "batch": max(batches),
        "span": span,
        "ratio": span / bound,
        "429s": too_many,
        "busiest": busiest,
        "per_window": total / span * 60,
        "wall": wall,
    }


async def _drop(schema: str, prefix: str) -> None:
    connection = await asyncpg.connect(POSTGRES_DSN)
    try:
        await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await connection.close()
    client = aioredis.Redis.from_url(REDIS_URL)
    keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=120, help="jobs per account")
    parser.add_argument("--speed", type=float, default=20.0, help="sandbox clock speed")
    parser.add_argument("--repeat", type=int, default=1, help="runs per row; the median shown")
    args = parser.parse_args()
    bound = 60 * (math.ceil(args.n / 20) - 1)
    print(
        f"N = {args.n} jobs per account, sandbox speed {args.speed:g} (60 s window = "
        f"{60 / args.speed:g} s real), bound = 60 * (ceil(N/20) - 1) = {bound} sandbox s "
        f"= {bound / args.speed:g} s real; median of {args.repeat} run(s)"
    )
    print(
        "| accounts | workers | batch (s) | batch / bound | order span / bound | 429s "
        "| busiest window | orders per window | x one worker | wall (s) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    base = None
    for accounts, workers in ((1, 1), (1, 2), (1, 4), (4, 4)):
        runs = [await measure(accounts, workers, args.n, args.speed) for _ in range(args.repeat)]
        row = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        row["429s"] = sum(run["429s"] for run in runs)
        row["busiest"] = max(run["busiest"] for run in runs)
        base = base or row["per_window"]
        print(
            f"| {accounts} | {workers} | {row['batch']:.1f} | {row['batch'] / bound:.3f} | "
            f"{row['ratio']:.3f} | {row['429s']:.0f} | {row['busiest']:.0f} | "
            f"{row['per_window']:.1f} | {row['per_window'] / base:.2f} | {row['wall']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    asyncio.run(main())
