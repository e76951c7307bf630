"""Peak memory (RSS) of BulkShipper streaming 20,000 jobs from a CSV, the order limit set high.

The sandbox runs at speed 1000, so its budget of 20 orders per 60 s becomes 20 per 0.06 s
(333 orders/s) and the limiter is set to exactly that: the run is bound by CPU, not the limit.

Run: .venv/bin/python benchmarks/bulk_memory.py [--n 20000] [--concurrency 64]

The sandbox runs in a separate process (``python -m shipping_async sandbox``) so that
its store of orders does not count; the journal is a SQLite file, as in production.
Compare the peak with the RSS after merely importing everything: the difference is what
the run holds, and it must not grow with N (rows are read lazily).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shipping_async._client import AsyncShippingClient
from shipping_async.bulk.readers import read_jobs
from shipping_async.bulk.shipper import BulkShipper
from shipping_async.limiter import RollingWindowLimiter

SPEED = 1000
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "shipments.csv"


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def write_csv(path: Path, n: int) -> None:
    rows = list(csv.DictReader(EXAMPLE.open(newline="")))
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        for index in range(n):
            row = rows[index % len(rows)]
            writer.writerow({**row, "customer_reference": f"MEM-{index:06d}"})


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "jobs.csv"
        write_csv(source, args.n)
        server = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "shipping_async", "sandbox", "--port", "0", "--speed", str(SPEED),
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert server.stdout is not None
        base_url = (await server.stdout.readline()).decode().split()[-1]
        token = (await server.stdout.readline()).decode().split()[-1]
        try:
            baseline = rss_mib()
            limiter = RollingWindowLimiter(20, 60.0 / SPEED)
            async with AsyncShippingClient(
                token, base_url=base_url, order_limiter=limiter
            ) as client:
                shipper = BulkShipper(
                    client, journal=Path(folder) / "batch.journal", concurrency=args.concurrency
                )
                started, done = time.monotonic(), 0
                async for result in shipper.run(read_jobs(source)):
                    done += result.status.value == "done"
                elapsed = time.monotonic() - started
        finally:
            server.terminate()
            await server.wait()
    print("| jobs | concurrency | done | seconds | RSS after imports MiB | peak RSS MiB |")
    print("|------|-------------|------|---------|-----------------------|--------------|")
    print(
        f"| {args.n} | {args.concurrency} | {done} | {elapsed:.1f} | {baseline:.1f} | {rss_mib():.1f} |"
    )


if __name__ == "__main__":
    asyncio.run(main())
