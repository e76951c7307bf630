"""Memory under hostile input: unauthenticated requests to the sandbox, a gzip bomb answer.

Run: .venv/bin/python benchmarks/hostile_memory.py [--requests 30000] [--bomb-mib 300]

1. A sandbox in its own process (``python -m shipping_async sandbox``) receives N requests
   without a token, each with a 4,000-character path; its RSS is read from /proc before
   and after. They are refused with 401 and only counted, so the RSS must not grow with N.
2. The client reads a 200 answer whose gzip body inflates to ``--bomb-mib`` MiB, with the
   default ``max_response_bytes`` (16 MiB): the Python heap's peak (tracemalloc) is what
   the client held before refusing it, printed beside what reading it whole would hold.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tracemalloc
import zlib
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shipping_async import APIResponseValidationError, AsyncShippingClient

PATH = "/orders/" + "x" * 4000


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def sandbox_rss(requests: int) -> tuple[float, float, int]:
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "shipping_async", "sandbox", "--port", "0",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert server.stdout is not None
    base_url = (await server.stdout.readline()).decode().split()[-1]
    await server.stdout.readline()  # the token line
    try:
        before = rss_mib(server.pid)
        statuses: dict[int, int] = {}
        gate = asyncio.Semaphore(50)
        async with aiohttp.ClientSession() as http:

            async def anonymous() -> None:
                async with gate, http.get(base_url + PATH) as response:
                    statuses[response.status] = statuses.get(response.status, 0) + 1

            await asyncio.gather(*(anonymous() for _ in range(requests)))
        after = rss_mib(server.pid)
    finally:
        server.terminate()
        await server.wait()
    return before, after, statuses.get(401, 0)


def gzip_bomb(mib: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\0" * (1 << 20)
    return b"".join(compressor.compress(block) for _ in range(mib)) + compressor.flush()


async def bomb_peak(mib: int) -> tuple[int, float, str]:
    body = gzip_bomb(mib)
    head = (
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(head + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/client_api/v2"
    outcome = "read whole"
    try:
        async with AsyncShippingClient("t0ken", base_url=base_url, max_retries=0) as client:
            tracemalloc.start()
            try:
                await client.quotes.get(1)
            except APIResponseValidationError:
                outcome = "APIResponseValidationError"
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    finally:
        server.close()
    return len(body), peak / (1 << 20), outcome


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=30_000)
    parser.add_argument("--bomb-mib", type=int, default=300)
    args = parser.parse_args()

    before, after, refused = await sandbox_rss(args.requests)
    print("| sandbox: unauthenticated requests | refused 401 | RSS before | RSS after |")
    print("|---:|---:|---:|---:|")
    print(
        f"| {args.requests:,} (4,000-char paths) | {refused:,} | {before:.1f} MiB | {after:.1f} MiB |"
    )
    print()
    size, peak, outcome = await bomb_peak(args.bomb_mib)
    print("| client: gzip answer | on the wire | inflates to | cap | outcome | heap peak |")
    print("|---|---:|---:|---:|---|---:|")
    print(
        f"| one 200 answer | {size / 1024:.0f} KiB | {args.bomb_mib} MiB | 16 MiB | "
        f"{outcome} | {peak:.1f} MiB |"
    )


if __name__ == "__main__":
    asyncio.run(main())
