"""What the client hooks cost: requests/s through the client with metrics off and on.

A deliberately fast server (aiohttp in a child process, one canned ``GET /webhooks/{id}``
answer, no work) leaves the client as the bottleneck, so whatever the hooks add shows as
fewer requests per second, and as more client CPU per request: the steadier figure on a
machine whose other load makes requests/s jump between rounds. Each round runs every configuration for ``--seconds`` in turn
(interleaved, in a rotating order, so drift in the machine's load hits all of them
alike); the table shows the median over ``--rounds`` rounds, and the median of each
round's ratio to that round's "off":

- off: ``AsyncShippingClient`` without hooks;
- metrics: ``hooks=[Metrics().client_hooks(...)]``, ``/metrics`` served and scraped once
  a round;
- metrics + traces: also ``ClientTracing()`` with no tracer provider configured (what a
  worker with the ``[otel]`` extra does until traces are turned on);
- off (again): a second client without hooks, the control: its distance from "off" is
  the noise of the run (other processes on the machine), not an effect.

    .venv/bin/python benchmarks/metrics_overhead.py
    .venv/bin/python benchmarks/metrics_overhead.py --rounds 9 --seconds 3 --concurrency 32
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable

import aiohttp

from shipping_async import AsyncShippingClient, ClientHooks
from shipping_async._hooks import Subscribers, observe_call
from shipping_async._retry import Operation
from shipping_async.telemetry.metrics import Metrics, MetricsServer
from shipping_async.telemetry.traces import ClientTracing

TOKEN = "bench_token_0123456789abcdef"

SERVER = textwrap.dedent(
    """
    import sys
    from aiohttp import web

    BODY = b'{"webhook": {"id": 7, "target_url": "https://hooks.example.test/h", '
    BODY += b'"events": ["shipment.updated.status"], "token": "x", "status": "active"}}'

    async def answer(request):
        return web.Response(body=BODY, content_type="application/json")

    app = web.Application()
    app.router.add_get("/client_api/v2/webhooks/{id}", answer)
    runner = web.AppRunner(app, access_log=None)

    async def main():
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        print(port, flush=True)
        import asyncio
        await asyncio.Event().wait()

    import asyncio
    asyncio.run(main())
    """
)


def pin(cpu: int) -> None:
    """Keep this process on one core (Linux), so that the scheduler moving it between
    cores does not add its own noise to the comparison."""
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {cpu})


def start_server() -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-c", SERVER],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: pin(1),  # the server on the second core, the client on the first
    )
    assert process.stdout is not None
    port = process.stdout.readline().strip()
    if not port.isdigit():
        process.kill()
        raise RuntimeError(f"the fast server did not start: {port!r}")
    return process, f"http://127.0.0.1:{port}/client_api/v2"


async def hammer(
    client: AsyncShippingClient, concurrency: int, seconds: float
) -> tuple[float, float]:
    """Requests per second that ``concurrency`` tasks get through ``client``, and the
    client process's CPU microseconds per request."""
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await client.webhooks.get(7)
            done += 1

    started, cpu = time.perf_counter(), time.process_time()
    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(worker())
    return done / (time.perf_counter() - started), (time.process_time() - cpu) / done * 1e6


def hook_cost(hooks: list[ClientHooks], calls: int = 20_000) -> float:
    """Microseconds the hooks machinery adds to one call of one attempt, without I/O."""
    operation = Operation(name="get_webhook", method="GET", path="/webhooks/7")
    observers = Subscribers(hooks)
    started = time.perf_counter()
    for _ in range(calls):
        observed = observe_call(observers, operation)
        with observed, observed.attempt():
            observed.status(200)
    return (time.perf_counter() - started) / calls * 1e6


def scrape(server: MetricsServer) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as answer:
        return len(answer.read())


async def main(args: argparse.Namespace) -> None:
    process, base_url = start_server()
    pin(0)
    metrics = Metrics()
    server = metrics.serve(port=0)
    configurations: dict[str, Callable[[], list[ClientHooks]]] = {
        "off": list,
        "metrics": lambda: [metrics.client_hooks("bench")],
        "metrics + traces": lambda: [metrics.client_hooks("bench"), ClientTracing()],
        "off (again)": list,  # the control: how far two identical clients land apart
    }
    rates: dict[str, list[float]] = {name: [] for name in configurations}
    costs: dict[str, list[float]] = {name: [] for name in configurations}
    try:
        # One aiohttp session (one connection pool) for all: the configurations differ
        # in their hooks only.
        session = aiohttp.ClientSession()
        clients = {
            name: AsyncShippingClient(TOKEN, base_url=base_url, session=session, hooks=hooks())
            for name, hooks in configurations.items()
        }
        for client in clients.values():  # warm-up: connections, imports, caches
            await hammer(client, args.concurrency, 0.5)
        names = list(clients)
        for round_ in range(args.rounds):
            # Rotate the order, so that no configuration always runs first or last.
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                rate, cost = await hammer(clients[name], args.concurrency, args.seconds)
                rates[name].append(rate)
                costs[name].append(cost)
            scrape(server)
        await session.close()
    finally:
        server.close()
        process.kill()
        process.wait()

    def ratio(values: dict[str, list[float]], name: str) -> float:
        """The median over rounds of the round's value against that round's "off"."""
        return statistics.median(
            v / off for v, off in zip(values[name], values["off"], strict=True)
        )

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    print(f"machine load average (1, 5, 15 min) at the end: {load} on {os.cpu_count()} cores")
    print(
        f"GET /webhooks/{{id}} through the client, {args.concurrency} tasks, "
        f"{args.rounds} rounds x {args.seconds:g} s each; medians, and the median of each "
        "round's ratio to 'off'"
    )
    print(
        f"{'configuration':<18} {'requests/s':>11} {'vs off':>7} "
        f"{'client CPU us/request':>22} {'vs off':>7}"
    )
    for name in configurations:
        rate, cost = statistics.median(rates[name]), statistics.median(costs[name])
        print(
            f"{name:<18} {rate:>11.0f} {ratio(rates, name):>7.3f} "
            f"{cost:>22.1f} {ratio(costs, name):>7.3f}"
        )
    # The same hooks without the network: what they add in absolute terms, and that
    # against the measured CPU cost of a request with them off.
    request_cost = statistics.median(costs["off"])
    best = {
        name: min(hook_cost(hooks()) for _ in range(15)) for name, hooks in configurations.items()
    }
    print()
    print(f"hooks alone, no I/O (best of 15 x 20,000 calls); a request costs {request_cost:.0f} us")
    print(f"{'configuration':<18} {'us/call':>8} {'added us':>9} {'added share':>12}")
    for name, cost in best.items():
        added = cost - best["off"]
        print(f"{name:<18} {cost:>8.2f} {added:>9.2f} {added / request_cost:>12.2%}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=16)
    asyncio.run(main(parser.parse_args()))
