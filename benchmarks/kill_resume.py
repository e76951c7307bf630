"""Kill/resume cycles of the example batch: duplicates, lost, unknown, 429s, time / bound.

Run: .venv/bin/python benchmarks/kill_resume.py [--cycles 20] [--kills 3] [--speed 20]
     [--seed 0] [--journal sqlite|postgres] [--kinds random,early,pause[,burst]]

Each cycle (one seed) ships ``examples/shipments.csv`` (60 jobs) with ``shipping-async
bulk ... --journal J --out R --rate-limit 20/S`` against a fresh sandbox at ``speed``
(the 60 s window lasts 60/speed real seconds), SIGKILLs the run up to ``kills`` times at
seeded random moments - anywhere in its first two windows, within one window after a
restarted run's first order, or inside a 429 pause the sandbox provokes; with ``--kinds``
also ``burst``: just after half the first window's orders were created, while the rest
are being sent - and resumes with
``--resume`` until a run ends on its own. Everything is judged from the sandbox's request
log (see ``tests/restart/harness.py``):

- dup: orders created beyond one per customer_reference;
- lost: jobs with no order at the server that the last run does not list ``unknown``;
- unknown: jobs the last run lists ``unknown``; "never created": of those, how many have
  no order at the server (the acceptance allows at most 1 over 20 cycles); "not on the
  wire": of those, how many had no request on the wire when their process died, read
  from the log alone (their last POST /orders did not reach the server, or was answered
  429, or a later request used its answer): a kill between the intent and the first
  byte, or a job that waited with its intent recorded (issue 13 item 1 forbids it);
- 429 restart: 429s within window + margin after a restarted run's first request;
  429 other: the remaining 429s not provoked by the benchmark (injected ones are listed
  apart);
- seconds: real time of the whole cycle (every run, process start-up included) against
  the bound, the least time 60 orders take at 20 per window (2 windows).

The default ``sqlite`` journal is the one most users run; ``postgres`` uses
``--journal postgresql://.../test?schema=...`` and ``--limiter redis://...`` (needs the
machine's PostgreSQL and Redis).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.restart.harness import Cycle, run_cycle

POSTGRES_DSN = "postgresql://postgres@127.0.0.1:5432/test"
REDIS_URL = "redis://127.0.0.1:6379/0"


async def one(seed: int, args: argparse.Namespace, folder: Path) -> Cycle:
    if args.journal == "sqlite":
        return await run_cycle(
            seed, folder / f"cycle{seed}", kills=args.kills, kinds=args.kinds, speed=args.speed
        )
    import asyncpg
    import redis.asyncio as aioredis

    name = f"bench_kr_{uuid.uuid4().hex[:10]}"
    try:
        return await run_cycle(
            seed,
            folder / f"cycle{seed}",
            journal=f"{POSTGRES_DSN}?schema={name}",
            limiter=f"{REDIS_URL}?prefix={name}",
            kills=args.kills,
            kinds=args.kinds,
            speed=args.speed,
        )
    finally:
        connection = await asyncpg.connect(POSTGRES_DSN)
        await connection.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        await connection.close()
        client = aioredis.Redis.from_url(REDIS_URL)
        keys = [key async for key in client.scan_iter(match=f"{name}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--kills", type=int, default=3, help="kills per cycle at most")
    parser.add_argument("--speed", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=0, help="the first cycle's seed")
    parser.add_argument("--journal", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument(
        "--kinds",
        type=lambda text: tuple(text.split(",")),
        default=("random", "early", "pause"),
        help="kinds of kill drawn: random, early, pause, burst",
    )
    args = parser.parse_args()
    if set(args.kinds) - {"random", "early", "pause", "burst"}:
        parser.error(f"--kinds: random, early, pause or burst, not {','.join(args.kinds)}")
    print(
        f"{args.cycles} cycles x 60 jobs, up to {args.kills} SIGKILLs each "
        f"({','.join(args.kinds)}), sandbox speed {args.speed:g} (window "
        f"{60 / args.speed:g} s real), {args.journal} journal"
    )
    print()
    print(
        "| seed | kills | exit | dup | lost | unknown | never created | not on the wire "
        "| 429 restart | 429 other | 429 injected | seconds | / bound |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    cycles: list[Cycle] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kill-resume-") as folder:
        for seed in range(args.seed, args.seed + args.cycles):
            c = await one(seed, args, Path(folder))
            cycles.append(c)
            print(
                f"| {seed} | {','.join(c.kills) or '-'} | {c.exit_codes[-1]} | {c.duplicates} "
                f"| {len(c.lost)} | {len(c.unknown)} | {len(c.unknown_never_created)} "
                f"| {len(c.unknown_not_on_wire)} "
                f"| {c.restart_429s} | {c.other_429s} "
                f"| {c.injected_429s} | {c.seconds:.1f} | {c.seconds / c.bound:.2f} |",
                flush=True,
            )
    seconds = sum(c.seconds for c in cycles)
    bound = sum(c.bound for c in cycles)
    print(
        f"| **total** | {sum(len(c.kills) for c in cycles)} kills | "
        f"{sum(c.exit_codes[-1] != 0 for c in cycles)} non-zero "
        f"| {sum(c.duplicates for c in cycles)} | {sum(len(c.lost) for c in cycles)} "
        f"| {sum(len(c.unknown) for c in cycles)} "
        f"| {sum(len(c.unknown_never_created) for c in cycles)} "
        f"| {sum(len(c.unknown_not_on_wire) for c in cycles)} "
        f"| {sum(c.restart_429s for c in cycles)} | {sum(c.other_429s for c in cycles)} "
        f"| {sum(c.injected_429s for c in cycles)} | {seconds:.1f} | {seconds / bound:.2f} |"
    )
    print()
    print(f"busiest window over all cycles: {max(c.busiest_window for c in cycles)} orders")
    print(f"wall: {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    asyncio.run(main())
