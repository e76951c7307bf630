"""What the benchmarks of the shared stores have in common: the bench database, a private
Redis, free ports and batches spread over accounts. Not a benchmark (no ``main``).

The scripts run as ``python benchmarks/NAME.py``, so this folder is first on ``sys.path``.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg

ROOT = Path(__file__).resolve().parents[1]
ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/test"
BENCH_DB = "shipping_bench"
BENCH_DSN = f"postgresql://postgres@127.0.0.1:5432/{BENCH_DB}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def account_name(index: int) -> str:
    return f"acct-{index:03d}"


def write_batch(path: Path, accounts: int, jobs: int, *, prefix: str) -> None:
    """``jobs`` rows cycled from the example batch, spread evenly over the accounts; the
    references are ``PREFIX-RUN-INDEX``, new for each batch."""
    with (ROOT / "examples" / "shipments.csv").open(newline="") as source:
        template = list(csv.DictReader(source))
    fields = [*template[0].keys(), "account"]
    run = uuid.uuid4().hex[:6]
    with path.open("w", newline="") as target:
        writer = csv.DictWriter(target, fieldnames=fields)
        writer.writeheader()
        for index in range(jobs):
            row = dict(template[index % len(template)])
            row["customer_reference"] = f"{prefix}-{run}-{index:05d}"
            row["account"] = account_name(index % accounts)
            writer.writerow(row)


@contextlib.contextmanager
def private_redis(folder: Path) -> Iterator[str]:
    """A ``redis-server`` of the run's own on a free port (its ``INFO commandstats``
    count only this run); yields its URL."""
    port = free_port()
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    command += ["--appendonly", "no", "--dir", str(folder)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    try:
        for _ in range(500):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                break
            time.sleep(0.01)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.kill()
        process.wait()


async def ensure_database() -> None:
    admin = await asyncpg.connect(ADMIN_DSN)
    try:
        if not await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", BENCH_DB):
            await admin.execute(f'CREATE DATABASE "{BENCH_DB}"')
    finally:
        await admin.close()


async def transactions() -> int:
    """Transactions of the bench database, once every backend that ran some has reported."""
    admin = await asyncpg.connect(ADMIN_DSN)
    query = "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1"
    try:
        last = -1
        for _ in range(40):  # backends report when idle or when they exit
            await admin.execute("SELECT pg_stat_clear_snapshot()")
            value = int(await admin.fetchval(query, BENCH_DB))
            if value == last:
                return value
            last = value
            await asyncio.sleep(0.25)
        return last
    finally:
        await admin.close()


async def drop_schema(schema: str) -> None:
    connection = await asyncpg.connect(BENCH_DSN)
    try:
        await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await connection.close()
