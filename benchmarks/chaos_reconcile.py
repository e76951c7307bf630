"""Chaos run: unknown orders settled from webhook evidence; duplicates, lost, left for a person.

Run: .venv/bin/python benchmarks/chaos_reconcile.py [--jobs 200] [--share 0.10] [--speed 50]
     [--seed 0] [--runs 1]

Each run ships ``jobs`` shipments (the example batch repeated, references made unique) with
``shipping-async bulk ... --webhook-listen ... --webhook-url ...`` against a fresh sandbox
at ``speed`` (its webhook delivery timeout set to the 30 s the reconciler assumes), whose
webhook delivers to the run's own receiver. A watcher of the sandbox's
request log injects, before seeded random POST /orders, one fault each, until ``share``
of all POST /orders got one, in equal parts:

- ``drop_after``: the order is created, the connection closed without an answer;
- ``delay_after``: the order is created, the answer comes after the client's timeout;
- ``status_after`` 502: the order is created, a gateway answers 5xx.

Judged from the sandbox's own order list, not from our journal:

- dup: orders created beyond one per customer_reference;
- lost: references with no order at the server;
- person: jobs the run left for a person (not ``done`` at its end: unknown or failed);
- settled: jobs whose result says ``reconciled from evidence``;
- faults: faults the sandbox applied to POST /orders.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import random
import socket
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from shipping_async.sandbox import SandboxServer

EXAMPLE = Path(__file__).parents[1] / "examples" / "shipments.csv"
KINDS = ("drop_after", "delay_after", "status_after")


def write_batch(path: Path, jobs: int) -> list[str]:
    rows = list(csv.DictReader(EXAMPLE.open(newline="")))
    references = []
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        for index in range(jobs):
            row = dict(rows[index % len(rows)])
            row["customer_reference"] = f"{row['customer_reference']}-{index:04d}"
            references.append(row["customer_reference"])
            writer.writerow(row)
    return references


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def inject(sandbox: SandboxServer, targets: list[int], done: asyncio.Event) -> int:
    """Before the POST /orders numbered in ``targets`` (0-based), add one fault each;
    returns how many were added."""
    control = sandbox.control
    kinds = [KINDS[i % len(KINDS)] for i in range(len(targets))]
    pending = list(zip(sorted(targets), kinds, strict=True))
    while pending and not done.is_set():
        seen = len(control.requests(method="POST", path="/orders"))
        armed = len(control.faults())
        if armed == 0 and seen >= pending[0][0]:
            _, kind = pending.pop(0)
            if kind == "status_after":
                control.add_fault(kind, "/orders", method="POST", status=502)
            elif kind == "delay_after":
                control.add_fault(kind, "/orders", method="POST", seconds=3000)
            else:
                control.add_fault(kind, "/orders", method="POST")
        await asyncio.sleep(0.002)
    return len(targets) - len(pending)


async def one_run(jobs: int, share: float, speed: float, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="chaos-") as folder:
        source = Path(folder) / "batch.csv"
        references = write_batch(source, jobs)
        out = Path(folder) / "results.jsonl"
        targets = rng.sample(range(jobs), round(jobs * share))
        # The delivery timeout the reconciler assumes (30 s of API time): at speed 50 that
        # is 0.6 real s for the run's receiver to answer, load included.
        async with SandboxServer(speed=speed, seed=seed, delivery_timeout=30.0) as sandbox:
            port = free_port()
            done = asyncio.Event()
            watcher = asyncio.create_task(inject(sandbox, targets, done))
            started = time.monotonic()
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "shipping_async", "bulk", str(source),
                "--base-url", sandbox.base_url,
                "--sandbox-speed", f"{speed:g}",
                "--rate-limit", f"20/{60 / speed:g}",
                "--journal", str(Path(folder) / "batch.journal"),
                "--out", str(out),
                "--timeout", "3",
                "--progress", "plain",
                "--webhook-listen", f"127.0.0.1:{port}",
                "--webhook-url", f"http://127.0.0.1:{port}/hook",
                env={**os.environ, "SHIPPING_ACCESS_TOKEN": sandbox.token},
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
            output, _ = await process.communicate()
            seconds = time.monotonic() - started
            done.set()
            injected = await watcher
            orders = Counter(order["customer_reference"] for order in sandbox.control.orders())
            faults = injected - len(sandbox.control.faults())  # applied to a POST /orders
        results = (
            [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
        )
    if process.returncode not in (0, 1):
        print(output.decode(errors="replace"), file=sys.stderr)
    for line in output.decode(errors="replace").splitlines():
        if line.startswith("unknown ") and " stage=" not in line:  # the reconciler's report
            print(f"  left: {line[:300]}", file=sys.stderr)
    return {
        "exit": float(process.returncode or 0),
        "dup": float(sum(n - 1 for n in orders.values() if n > 1)),
        "lost": float(sum(1 for reference in references if orders[reference] == 0)),
        "person": float(sum(1 for line in results if line["status"] != "done")),
        "settled": float(sum(1 for line in results if "evidence" in line)),
        "faults": float(faults),
        "seconds": seconds,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--share", type=float, default=0.10)
    parser.add_argument("--speed", type=float, default=50.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    columns = ("seed", "jobs", "faults", "settled", "dup", "lost", "person", "exit", "seconds")
    print("  ".join(f"{name:>8}" for name in columns))
    for run in range(args.runs):
        seed = args.seed + run
        row = await one_run(args.jobs, args.share, args.speed, seed)
        values = {"seed": seed, "jobs": args.jobs, **row}
        print(
            "  ".join(
                f"{values[name]:>8.1f}" if name == "seconds" else f"{int(values[name]):>8d}"
                for name in columns
            ),
            flush=True,
        )


if __name__ == "__main__":
    asyncio.run(main())
