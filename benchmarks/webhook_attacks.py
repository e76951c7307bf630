"""What stalled and trickling senders cost the webhook receiver: memory, and how long they last.

The receiver (``create_webhook_app``) runs in a child process; this process attacks it on
loopback, without a token, as issue 15 measured it:

- **stalled bodies**: ``--connections`` connections each send the headers of a
  65,536-byte body, then 65,000 of its bytes, and stall;
- **slow headers**: ``--slow`` connections each send one header byte every 2 s.

Each attack runs side by side against the receiver with its default bounds served on
``webhook_socket()`` (a 4 KiB kernel receive buffer per connection), the same on a plain
socket, and with the bounds lifted (``max_concurrent_reads`` and the deadlines out of
reach) on a plain socket, as the receiver was before them. The table shows the receiver's resident memory before and at
its peak, and when the server closed the connections (``open`` = still open when the
observation ended).

    .venv/bin/python benchmarks/webhook_attacks.py
    .venv/bin/python benchmarks/webhook_attacks.py --connections 1500 --observe 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from shipping_async.models.webhooks import WebhookEvent
from shipping_async.webhooks import create_webhook_app, webhook_socket

TOKEN = "whk_benchmark_token_0123456789abcdef"
BODY_SIZE = 65_536
SENT = 65_000
#: Each attack runs against each of these receivers.
RECEIVERS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("defaults, webhook_socket()", {}),
    ("defaults, plain socket", {"plain_socket": True}),
    (
        "bounds lifted, plain socket",
        {
            "plain_socket": True,
            "max_concurrent_reads": 1_000_000,
            "body_timeout": 3600.0,
            "header_timeout": 3600.0,
        },
    ),
)


def serve(port_out: Any, stop: Any, options: dict[str, Any]) -> None:
    """Child process: run the receiver on 127.0.0.1, report the port, serve until stopped."""
    logging.disable(logging.WARNING)  # one refusal line per attacking connection otherwise
    asyncio.run(_serve(port_out, stop, options))


async def _serve(port_out: Any, stop: Any, options: dict[str, Any]) -> None:
    async def ignore(event: WebhookEvent) -> None:
        pass

    plain_socket = options.pop("plain_socket", False)
    runner = web.AppRunner(create_webhook_app(ignore, token=TOKEN, **options), access_log=None)
    await runner.setup()
    if plain_socket:  # the kernel's default receive buffer (about 128 KiB on Linux)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
    else:
        sock = webhook_socket("127.0.0.1", 0)
    await web.SockSite(runner, sock, backlog=4096).start()
    port_out.send(runner.addresses[0][1])
    await asyncio.get_running_loop().run_in_executor(None, stop.wait)
    await runner.cleanup()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def stalled_body(port: int, observe: float) -> float | None:
    """Send 65,000 of 65,536 body bytes and stall; seconds until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            b"POST /webhooks HTTP/1.1\r\nHost: receiver\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {BODY_SIZE}\r\n\r\n".encode()
            + b'{"pad":"'
            + b"x" * (SENT - 8)
        )
        await writer.drain()
        return await _closed_within(reader, observe)
    finally:
        writer.close()


async def slow_headers(port: int, observe: float) -> float | None:
    """One header byte every 2 s; seconds until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = b"POST /webhooks HTTP/1.1\r\nHost: receiver\r\nX-Slow: " + b"a" * 1000

    async def trickle() -> None:
        for byte in head:
            writer.write(bytes([byte]))
            await asyncio.sleep(2)

    sender = asyncio.create_task(trickle())
    try:
        return await _closed_within(reader, observe)
    finally:
        sender.cancel()
        writer.close()


async def _closed_within(reader: asyncio.StreamReader, observe: float) -> float | None:
    started = time.monotonic()
    try:
        async with asyncio.timeout(observe):
            while await reader.read(65_536):
                pass
    except TimeoutError:
        return None
    except OSError:
        pass  # reset by the server: closed too
    return time.monotonic() - started


async def attack(pid: int, port: int, kind: str, count: int, observe: float) -> dict[str, Any]:
    before = rss_mib(pid)
    peak = before
    attacker = stalled_body if kind == "stalled bodies" else slow_headers

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, rss_mib(pid))
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    closed = await asyncio.gather(*(attacker(port, observe) for _ in range(count)))
    sampler.cancel()
    times = [seconds for seconds in closed if seconds is not None]
    return {
        "attack": kind,
        "connections": count,
        "rss_before_mib": round(before, 1),
        "rss_peak_mib": round(peak, 1),
        "rss_growth_mib": round(peak - before, 1),
        "closed": len(times),
        "still_open": count - len(times),
        "closed_median_s": round(statistics.median(times), 2) if times else None,
        "closed_max_s": round(max(times), 2) if times else None,
    }


def run(kind: str, count: int, observe: float, options: dict[str, Any]) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    port_in, port_out = context.Pipe(duplex=False)
    stop = context.Event()
    server = context.Process(target=serve, args=(port_out, stop, options), daemon=True)
    server.start()
    try:
        port = port_in.recv()
        assert server.pid is not None
        time.sleep(0.5)  # let the child settle before the baseline
        return asyncio.run(attack(server.pid, port, kind, count, observe))
    finally:
        stop.set()
        server.join(10)
        if server.is_alive():
            server.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1500, help="stalled bodies")
    parser.add_argument("--slow", type=int, default=200, help="slow-header connections")
    parser.add_argument(
        "--observe", type=float, default=20.0, help="seconds to wait for the server to close"
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)

    rows = []
    for kind, count in (("stalled bodies", args.connections), ("slow headers", args.slow)):
        for label, options in RECEIVERS:
            row = run(kind, count, args.observe, dict(options))
            rows.append({"receiver": label, **row})
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"loopback, 1 receiver process; observed {args.observe:g} s per attack")
    print(
        "| attack | receiver | connections | RSS before MiB | RSS peak MiB | growth MiB "
        "| closed | still open | closed after (median / max s) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        after = f"{row['closed_median_s']} / {row['closed_max_s']}" if row["closed"] else "-"
        print(
            f"| {row['attack']} | {row['receiver']} | {row['connections']:,} "
            f"| {row['rss_before_mib']} | {row['rss_peak_mib']} | {row['rss_growth_mib']} "
            f"| {row['closed']:,} | {row['still_open']:,} | {after} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
