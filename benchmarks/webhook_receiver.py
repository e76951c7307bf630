"""How many webhook deliveries per second the receiver accepts on loopback.

The receiver (``create_webhook_app``, a handler that counts) runs in a child process; this
process is the sender: ``--connections`` keep-alive connections posting documented event
bodies as fast as the answers come back. Of the deliveries, ``--duplicates`` (a fraction)
re-send a body already sent, as a retry would, and ``--wrong-token`` carry a forged
token. The receiver must drop every duplicate and answer no forged delivery with a 2xx.

    .venv/bin/python benchmarks/webhook_receiver.py
    .venv/bin/python benchmarks/webhook_receiver.py --deliveries 50000 --connections 128

Every duplicate is sent after all new events (a retry comes 20-200 s after the first
attempt), so the receiver's ``dedupe_size`` must hold the whole run, as in production it
must hold every event of the last 200 s.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import multiprocessing
import random
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import msgspec
from aiohttp import web

from shipping_async.models.webhooks import WebhookEvent
from shipping_async.webhooks import WEBHOOK_RECEIVER, create_webhook_app

TOKEN = "whk_benchmark_token_0123456789abcdef"
FORGED = "whk_forged_token_0123456789abcdef000"
START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def body(index: int, token: str = TOKEN) -> bytes:
    """The delivery body of event ``index``: one status event of one order each."""
    return msgspec.json.encode(
        {
            "object_type": "order",
            "object_id": 100_000 + index,
            "event_type": "shipment.updated.status",
            "original_value": "awaiting_pickup",
            "updated_value": "in_transit",
            "updated_at_utc": (START + timedelta(milliseconds=index))
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "token": token,
        }
    )


def plan(deliveries: int, duplicates: float, wrong_token: float, seed: int) -> list[bytes]:
    """The bodies to send, shuffled: new events, re-sent ones, forged ones."""
    rng = random.Random(seed)
    n_forged = round(deliveries * wrong_token)
    n_dupes = round(deliveries * duplicates)
    n_new = deliveries - n_forged - n_dupes
    bodies = [body(i) for i in range(n_new)]
    bodies += [body(rng.randrange(n_new)) for _ in range(n_dupes)]
    bodies += [body(n_new + i, FORGED) for i in range(n_forged)]
    # Keep each re-send after its original (a retry follows the first attempt): shuffle
    # the new and forged bodies, then put each duplicate late in the run.
    head = bodies[:n_new] + bodies[n_new + n_dupes :]
    rng.shuffle(head)
    return head + bodies[n_new : n_new + n_dupes]


# --- the receiver process -------------------------------------------------------------


def serve(port_out: Any, stop: Any, dedupe_size: int) -> None:
    """Child process: run the receiver on 127.0.0.1, report the port, serve until stopped."""
    logging.getLogger("shipping_async.webhooks").setLevel(logging.ERROR)  # 401s are expected
    asyncio.run(_serve(port_out, stop, dedupe_size))


async def _serve(port_out: Any, stop: Any, dedupe_size: int) -> None:
    handled = 0

    async def count(event: WebhookEvent) -> None:
        nonlocal handled
        handled += 1

    app = create_webhook_app(count, token=TOKEN, dedupe_size=dedupe_size)

    async def stats(request: web.Request) -> web.Response:
        receiver = app[WEBHOOK_RECEIVER]
        await receiver.join()
        return web.json_response({**dataclasses.asdict(receiver.stats), "handler_calls": handled})

    app.router.add_get("/stats", stats)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port_out.send(runner.addresses[0][1])
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, stop.wait)
    await runner.cleanup()


# --- the sender (this process) ---------------------------------------------------------


async def send_all(
    url: str, bodies: list[bytes], connections: int
) -> tuple[Counter[int], int, float]:
    """Send every body; the answers by status, the 2xx answers to forged bodies, seconds."""
    statuses: Counter[int] = Counter()
    forged_2xx = 0
    queue = iter(bodies)
    headers = {"Content-Type": "application/json"}
    forged = FORGED.encode()
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def worker() -> None:
            nonlocal forged_2xx
            for data in queue:  # one shared iterator: each body is sent once
                async with http.post(url, data=data, headers=headers) as response:
                    await response.read()
                    statuses[response.status] += 1
                    if 200 <= response.status < 300 and forged in data:
                        forged_2xx += 1

        # Warm the connections up so the timing measures deliveries, not TCP handshakes.
        await asyncio.gather(*(http.get(url.rsplit("/", 1)[0] + "/stats") for _ in range(2)))
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        elapsed = time.perf_counter() - started
    return statuses, forged_2xx, elapsed


async def fetch_stats(base: str) -> dict[str, int]:
    async with aiohttp.ClientSession() as http, http.get(base + "/stats") as response:
        stats: dict[str, int] = await response.json()
        return stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=20_000)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--duplicates", type=float, default=0.05)
    parser.add_argument("--wrong-token", type=float, default=0.05)
    parser.add_argument(
        "--dedupe-size",
        type=int,
        default=100_000,
        help="events the receiver remembers; must cover the run, as in production it must "
        "cover rate x 200 s of retries (default 100,000)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)

    bodies = plan(args.deliveries, args.duplicates, args.wrong_token, args.seed)
    genuine = [data for data in bodies if FORGED.encode() not in data]
    expected_duplicates = len(genuine) - len(set(genuine))
    context = multiprocessing.get_context("spawn")
    port_in, port_out = context.Pipe(duplex=False)
    stop = context.Event()
    server = context.Process(target=serve, args=(port_out, stop, args.dedupe_size), daemon=True)
    server.start()
    try:
        base = f"http://127.0.0.1:{port_in.recv()}"
        statuses, forged_2xx, elapsed = asyncio.run(
            send_all(base + "/webhooks", bodies, args.connections)
        )
        stats = asyncio.run(fetch_stats(base))
    finally:
        stop.set()
        server.join(10)

    rate = len(bodies) / elapsed
    result = {
        "deliveries": len(bodies),
        "seconds": round(elapsed, 3),
        "deliveries_per_s": round(rate),
        "duplicates_dropped": stats["duplicates"],
        "wrong_token_2xx": forged_2xx,
        "accepted": stats["accepted"],
        "handled": stats["handler_calls"],
        "statuses": dict(sorted(statuses.items())),
        "connections": args.connections,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"loopback, 1 receiver process, {args.connections} keep-alive connections")
        print("| deliveries | seconds | deliveries/s | duplicates dropped | wrong-token 2xx |")
        print("|---:|---:|---:|---:|---:|")
        print(
            f"| {len(bodies):,} | {elapsed:.2f} | {rate:,.0f} | {stats['duplicates']:,} "
            f"| {forged_2xx} |"
        )
        print(
            f"answers: {dict(sorted(statuses.items()))}; accepted {stats['accepted']:,}, "
            f"handled {stats['handler_calls']:,}"
        )
    good = (
        forged_2xx == 0
        and stats["duplicates"] == expected_duplicates
        and stats["handler_calls"] == stats["accepted"] == len(set(genuine))
    )
    if not good:
        print(f"FAILED: expected {expected_duplicates} duplicates dropped, 0 forged 2xx")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
