"""Client CPU per request: raw aiohttp + msgspec against the SDK, the five requests of a job.

Run: .venv/bin/python benchmarks/request_cost.py [--requests 2000] [--rounds 4]
     [--concurrency 32] [--only quote,order,waybill,slots,pickup]

A canned-answer server runs in its own process: at start it ships one job (the first row of
``examples/shipments.csv``, a hub order) through an in-process sandbox and keeps the
sandbox's answer to each request (bodies and statuses), then serves those bytes, as
aiohttp's ``web.Response`` does for the sandbox, to whoever asks. The measuring process
runs on uvloop and sends, for each of the five operations of a job, ``--requests``
requests at ``--concurrency`` through

Every request on an order has an order id of its own, and every order and pickup request
is a new one (the order's for an estimate id of its own), as in a batch; the quote request
is the one the batch reader read (and checked), as in a batch.

- ``raw``: one ``aiohttp.ClientSession``, the headers the SDK sends (built once), the body
  encoded per request with a ``msgspec.json.Encoder``, the answer read with
  ``response.read()`` and decoded by a ``msgspec.json.Decoder`` into the SDK's own
  answer models (the same types and date hooks the SDK decodes into);
- ``sdk``: ``AsyncShippingClient`` (``quotes.create``, ``orders.create`` under an order
  intent whose commit costs nothing and an order limiter whose limit is lifted,
  ``orders.create_waybill``, ``orders.pickup_availabilities``, ``orders.schedule_pickup``).

Rounds alternate (raw then sdk, then sdk then raw, ...) after a warm-up round that is not
counted. CPU = user + system seconds of the measuring process (``getrusage``) over the
requests, in microseconds per request: the median over the rounds; ``sdk/raw`` is the
median of each round's ratio (the two sides of a round run back to back, so a load that
comes and goes on a shared machine disturbs it least). The server's CPU is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import resource
import statistics
import subprocess
import sys
import time as timer
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, time
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import uvloop
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shipping_async import AsyncShippingClient  # noqa: E402
from shipping_async._http import USER_AGENT  # noqa: E402
from shipping_async._retry import order_intent  # noqa: E402
from shipping_async.bulk.jobs import ShipmentJob  # noqa: E402
from shipping_async.bulk.readers import read_jobs  # noqa: E402
from shipping_async.limiter import RollingWindowLimiter  # noqa: E402
from shipping_async.models import PickupAvailability, choose_pickup_window  # noqa: E402
from shipping_async.models._base import dec_hook, enc_hook  # noqa: E402
from shipping_async.models.orders import _OrderEnvelope  # noqa: E402
from shipping_async.models.pickups import ScheduledPickup, SchedulePickupRequest  # noqa: E402
from shipping_async.models.pickups import _request as window_request  # noqa: E402
from shipping_async.models.quotes import _QuoteEnvelope  # noqa: E402

TOKEN = "tok-request-cost-bench-0123456789abcdef"
PREFIX = "/client_api/v2"
OPERATIONS = ("quote", "order", "waybill", "slots", "pickup")


def pickup_request() -> SchedulePickupRequest:
    """A new pickup request, made as choose_pickup_window makes the one of a batch's
    window; the canned server answers whatever is asked, so any window will do."""
    return window_request(date(2030, 1, 7), time(10, 0), time(12, 0))


class _PickupEnvelope(msgspec.Struct):
    scheduled_pickup: ScheduledPickup


# -- the canned-answer server (its own process) ------------------------------------------


def first_job() -> ShipmentJob:
    job = next(read_jobs(ROOT / "examples" / "shipments.csv"))
    assert isinstance(job, ShipmentJob), job
    return job


async def capture() -> dict[str, tuple[int, bytes]]:
    """Ship one job through an in-process sandbox; each route's status and answer."""
    from shipping_async.sandbox import SandboxServer

    job = first_job()
    encode = msgspec.json.Encoder(enc_hook=enc_hook).encode
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    answers: dict[str, tuple[int, bytes]] = {}
    async with (
        SandboxServer(token=TOKEN, rate_limit=1_000_000) as sandbox,
        aiohttp.ClientSession(headers=headers) as session,
    ):
        base = sandbox.base_url

        async def call(name: str, method: str, path: str, body: bytes | None) -> Any:
            async with session.request(method, base + path, data=body) as reply:
                raw = await reply.read()
                if reply.status >= 300:
                    raise SystemExit(f"sandbox: {method} {path}: {reply.status} {raw[:300]!r}")
                answers[name] = (reply.status, raw)
                return msgspec.json.decode(raw)

        quote = await call("quote", "POST", "/quotes", encode(job.quote))
        quote = quote.get("quote", quote)
        estimate_id = quote["estimates"][0]["estimate_id"]
        order_body = encode({"order": job.order.to_request(estimate_id)})
        order_id = (await call("order", "POST", "/orders", order_body))["order"]["id"]
        await call("waybill", "POST", f"/orders/{order_id}/waybills", b"{}")
        slots = await call("slots", "GET", f"/orders/{order_id}/pickup_availabilities", None)
        available = msgspec.convert(slots, list[PickupAvailability], dec_hook=dec_hook)
        window = choose_pickup_window(available, job.pickup, now=sandbox.clock.now())
        body = encode(window.request.to_wire())
        await call("pickup", "POST", f"/orders/{order_id}/schedule_pickups", body)
    return answers


async def serve() -> None:
    answers = await capture()

    def canned(name: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        status, body = answers[name]

        async def handler(request: web.Request) -> web.Response:
            await request.read()
            return web.Response(body=body, status=status, content_type="application/json")

        return handler

    app = web.Application()
    app.router.add_post(f"{PREFIX}/quotes", canned("quote"))
    app.router.add_post(f"{PREFIX}/orders", canned("order"))
    app.router.add_post(PREFIX + "/orders/{id}/waybills", canned("waybill"))
    app.router.add_get(PREFIX + "/orders/{id}/pickup_availabilities", canned("slots"))
    app.router.add_post(PREFIX + "/orders/{id}/schedule_pickups", canned("pickup"))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    sizes = " ".join(f"{name}={len(body)}B" for name, (_, body) in answers.items())
    print(f"listening http://127.0.0.1:{port}{PREFIX} {sizes}", flush=True)
    # Until the measuring process closes our stdin (or dies).
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await runner.cleanup()


# -- the measuring process ---------------------------------------------------------------


class _Intent:
    """An order intent whose commit costs nothing (the journal's own cost is
    ``journal_cost.py``'s)."""

    async def granted(self) -> None:
        return None

    def sending(self) -> None:
        return None

    async def withdrawn(self) -> None:
        return None


@dataclass
class Figures:
    """CPU seconds and requests of one side of one operation, per round."""

    per_round: list[float] = field(default_factory=list)

    def median_us(self) -> float:
        return statistics.median(self.per_round)


Send = Callable[[], Awaitable[Any]]


def order_ids() -> Iterator[int]:
    """A new order id for every request, as a batch has (the canned server takes any):
    yarl caches the URLs of texts it has seen, which repeated ids would all hit."""
    return itertools.count(1_000_000)


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run_many(send: Send, requests: int, concurrency: int) -> float:
    """Client CPU microseconds per request for ``requests`` sends at ``concurrency``."""
    left = requests

    async def lane() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await send()

    started = cpu()
    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(lane())
    return (cpu() - started) / requests * 1e6


class Raw:
    """The five requests, as one would write them with aiohttp and msgspec alone."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        job = first_job()
        self.session = session
        self.base = base
        self.quote_request = job.quote
        self.order = job.order
        self.encoder = msgspec.json.Encoder(enc_hook=enc_hook)
        self.quotes = msgspec.json.Decoder(_QuoteEnvelope, dec_hook=dec_hook)
        self.orders = msgspec.json.Decoder(_OrderEnvelope, dec_hook=dec_hook)
        self.slots_decoder = msgspec.json.Decoder(list[PickupAvailability], dec_hook=dec_hook)
        self.pickups = msgspec.json.Decoder(_PickupEnvelope, dec_hook=dec_hook)
        self.json_headers = {
            "Authorization": f"Bearer {TOKEN}",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
            "Content-Type": "application/json",
        }
        self.get_headers = {k: v for k, v in self.json_headers.items() if k != "Content-Type"}

    async def _call(self, method: str, path: str, body: bytes | None, decoder: Any) -> Any:
        headers = self.json_headers if body is not None else self.get_headers
        async with self.session.request(
            method, self.base + path, data=body, headers=headers
        ) as reply:
            raw = await reply.read()
            if reply.status >= 300:
                raise RuntimeError(f"{method} {path}: {reply.status}")
        return decoder.decode(raw)

    def sends(self) -> dict[str, Send]:
        oid, estimate = order_ids(), order_ids()
        return {
            "quote": lambda: self._call(
                "POST", "/quotes", self.encoder.encode(self.quote_request), self.quotes
            ),
            "order": lambda: self._call(
                "POST",
                "/orders",
                self.encoder.encode({"order": self.order.to_request(next(estimate))}),
                self.orders,
            ),
            "waybill": lambda: self._call(
                "POST", f"/orders/{next(oid)}/waybills", b"{}", self.orders
            ),
            "slots": lambda: self._call(
                "GET", f"/orders/{next(oid)}/pickup_availabilities", None, self.slots_decoder
            ),
            "pickup": lambda: self._call(
                "POST",
                f"/orders/{next(oid)}/schedule_pickups",
                self.encoder.encode(pickup_request().to_wire()),
                self.pickups,
            ),
        }


class Sdk:
    """The same five requests through ``AsyncShippingClient``."""

    def __init__(self, client: AsyncShippingClient) -> None:
        self.client = client
        job = first_job()
        self.quote_request = job.quote
        self.order = job.order
        self.estimates = order_ids()

    async def _order(self) -> Any:
        context = order_intent.set(_Intent())
        try:
            return await self.client.orders.create(self.order.to_request(next(self.estimates)))
        finally:
            order_intent.reset(context)

    def sends(self) -> dict[str, Send]:
        orders, oid = self.client.orders, order_ids()
        return {
            "quote": lambda: self.client.quotes.create(self.quote_request),
            "order": self._order,
            "waybill": lambda: orders.create_waybill(next(oid)),
            "slots": lambda: orders.pickup_availabilities(next(oid)),
            "pickup": lambda: orders.schedule_pickup(next(oid), pickup_request()),
        }


async def measure(args: argparse.Namespace, base: str) -> dict[str, dict[str, Figures]]:
    figures = {op: {"raw": Figures(), "sdk": Figures()} for op in args.only}
    limiter = RollingWindowLimiter(limit=1_000_000_000, window=60.0)
    async with (
        aiohttp.ClientSession() as session,
        AsyncShippingClient(TOKEN, base_url=base, order_limiter=limiter) as client,
    ):
        sides = {"raw": Raw(session, base).sends(), "sdk": Sdk(client).sends()}
        for round_ in range(args.rounds + 1):
            warm = round_ == 0
            order_of_sides = ("raw", "sdk") if round_ % 2 else ("sdk", "raw")
            for op in args.only:
                for side in order_of_sides:
                    count = max(args.requests // 10, args.concurrency) if warm else args.requests
                    us = await run_many(sides[side][op], count, args.concurrency)
                    if not warm:
                        figures[op][side].per_round.append(us)
            if not warm:
                print(f"  round {round_} done", file=sys.stderr)
    return figures


def report(figures: dict[str, dict[str, Figures]]) -> None:
    print(f"{'operation':<34} {'raw us':>8} {'sdk us':>8} {'sdk/raw':>8}   sdk/raw per round")
    names = {
        "quote": "POST /quotes",
        "order": "POST /orders (limiter, intent gate)",
        "waybill": "POST /orders/{id}/waybills",
        "slots": "GET /orders/{id}/pickup_avail..",
        "pickup": "POST /orders/{id}/schedule_pick..",
    }
    rows = {name: sides for name, sides in figures.items()}
    job = {
        side: Figures(
            [
                sum(values)
                for values in zip(*(s[side].per_round for s in rows.values()), strict=True)
            ]
        )
        for side in ("raw", "sdk")
    }
    for name, sides in [*((names[op], sides) for op, sides in rows.items()), ("a job", job)]:
        # Each round's pair ran back to back: their ratio is what a load that comes and
        # goes on a shared machine disturbs least, so the column is the median of those.
        ratios = [
            sdk / raw
            for raw, sdk in zip(*(sides[s].per_round for s in ("raw", "sdk")), strict=True)
        ]
        print(
            f"{name:<34} {sides['raw'].median_us():8.1f} {sides['sdk'].median_us():8.1f} "
            f"{statistics.median(ratios):8.2f}x   {' '.join(f'{r:.2f}' for r in ratios)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="per operation, side, round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--only", default=",".join(OPERATIONS))
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        uvloop.run(serve())
        return
    args.only = [name for name in args.only.split(",") if name]
    unknown = set(args.only) - set(OPERATIONS)
    if unknown:
        parser.error(f"--only: unknown operations {sorted(unknown)}")
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        if not line.startswith("listening "):
            raise SystemExit(f"the canned server did not start: {line!r}")
        _, base, *sizes = line.split()
        print(
            f"answers: {' '.join(sizes)}; {args.requests} requests x {args.rounds} rounds "
            f"per side, concurrency {args.concurrency}, uvloop",
            file=sys.stderr,
        )
        started = timer.monotonic()
        figures = uvloop.run(measure(args, base))
        print(f"  {timer.monotonic() - started:.1f} s", file=sys.stderr)
        report(figures)
    finally:
        assert server.stdin is not None
        server.stdin.close()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


if __name__ == "__main__":
    main()
