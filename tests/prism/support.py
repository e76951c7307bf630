"""Prism, the OpenAPI mock server, on our document: installed on demand, driven by every method.

Prism (npm ``@stoplight/prism-cli``, pinned below) is installed into the gitignored
``.cache/prism`` of the checkout when it is missing (``.ci/run`` installs it there first).
:func:`drive` calls every SDK method against a running Prism through a session that
records each answer's status and Prism's ``sl-violations`` header, and counts what a user
would meet: decode failures, outcome-unknown errors on 2xx answers, requests Prism refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import date, time
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp

from shipping_async import AsyncShippingClient
from shipping_async.errors import (
    APIResponseValidationError,
    APIStatusError,
    OutcomeUnknownError,
    ShippingError,
)
from shipping_async.models import (
    Address,
    HSCode,
    OrderRequest,
    Package,
    QuoteRequest,
    SchedulePickupRequest,
)

PRISM_PACKAGE = "@stoplight/prism-cli"
PRISM_VERSION = "5.16.0"
ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "prism"
DOCUMENT = ROOT / "shipping_async" / "sandbox" / "openapi.json"
TOKEN = "prism-token"


def prism_binary() -> Path:
    """The pinned Prism, installed into ``.cache/prism`` first if it is not there."""
    binary = CACHE / "node_modules" / ".bin" / "prism"
    installed = CACHE / "node_modules" / "@stoplight" / "prism-cli" / "package.json"
    if installed.exists() and json.loads(installed.read_text())["version"] == PRISM_VERSION:
        return binary
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is needed to install Prism (node and npm come with the machine)")
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [npm, "install", "--prefix", str(CACHE), "--no-audit", "--no-fund", "--ignore-scripts",
         "--loglevel=error", f"{PRISM_PACKAGE}@{PRISM_VERSION}"],
        check=True,
        env={**os.environ, "SCARF_ANALYTICS": "false"},
        timeout=600,
    )  # fmt: skip
    return binary


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class RunningPrism:
    base_url: str
    mode: str
    process: asyncio.subprocess.Process


@contextlib.asynccontextmanager
async def prism(*, dynamic: bool, document: Path = DOCUMENT) -> AsyncIterator[RunningPrism]:
    """Prism mocking ``document`` on a free loopback port (``-d``: dynamic answers)."""
    binary = await asyncio.to_thread(prism_binary)
    port = _free_port()
    args = [str(binary), "mock", "-h", "127.0.0.1", "-p", str(port), str(document)]
    if dynamic:
        args.insert(2, "-d")
    process = await asyncio.create_subprocess_exec(
        *args,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "SCARF_ANALYTICS": "false", "NO_COLOR": "1"},
    )
    running = RunningPrism(f"http://127.0.0.1:{port}", "dynamic" if dynamic else "static", process)
    try:
        await _ready(running)
        yield running
    finally:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()


async def _ready(running: RunningPrism, seconds: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    async with aiohttp.ClientSession() as session:
        while True:
            if running.process.returncode is not None:
                raise RuntimeError(f"prism exited with {running.process.returncode}")
            try:
                async with session.get(running.base_url + "/") as response:
                    await response.read()
                    return
            except aiohttp.ClientError:
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.2)


# -- driving every SDK method --------------------------------------------------------------


@dataclass
class Tally:
    """What one SDK method met over its calls."""

    calls: int = 0
    ok: int = 0
    decode_failures: int = 0
    unknown_on_2xx: int = 0
    refused: int = 0
    answer_violations: int = 0
    other: Counter[str] = field(default_factory=Counter)
    undecoded_fields: int = 0


@dataclass
class Recorder:
    """The session middleware's notes: every answer's status and Prism's request violations."""

    answers: list[tuple[str, str, int, list[Any], list[Any]]] = field(default_factory=list)

    async def __call__(
        self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        response = await handler(request)
        violations = json.loads(response.headers.get("sl-violations", "[]"))
        on_request = [item for item in violations if item.get("location", [""])[0] == "request"]
        on_answer = [item for item in violations if item.get("location", [""])[0] == "response"]
        self.answers.append(
            (request.method, request.url.path, response.status, on_request, on_answer)
        )
        return response


def _address(country_id: int, city: str) -> Address:
    return Address(
        name="Ada Shipper", address_1="1 Main Street", city=city, country_id=country_id,
        postal_code="10001", email="ada@example.com", phone="+1 212 555 0100",
    )  # fmt: skip


def quote_request(*, hub: bool = False) -> QuoteRequest:
    return QuoteRequest(
        origin_country_id=840,
        destination_country_id=276 if hub else 124,
        is_document=False,
        is_stackable=True,
        is_liftgate_required=False,
        purpose_of_shipment_id=1,
        is_shipment_protection_required=False,
        value_of_goods=Decimal("120.50"),
        value_of_goods_currency_id="USD",
        mass_unit="kg",
        distance_unit="cm",
        packages=[Package(weight=2, width=20, height=10, length=30)],
        hub_transit=hub,
    )


def order_request(reference: str) -> OrderRequest:
    return OrderRequest(
        origin_address=_address(840, "New York"),
        destination_address=_address(124, "Toronto"),
        pickup_instructions="Ring twice",
        purpose_of_shipment_id=1,
        quote_estimate_id=1234567,
        customer_reference=reference,
        description_of_contents="Books",
        hs_codes=[
            HSCode(code="4901.99", description="Books", quantity=2, cost=Decimal("60.25"),
                   weight=1.0, country_id=840)
        ],
    )  # fmt: skip


WINDOW = SchedulePickupRequest(
    scheduled_date=date(2026, 1, 7), time_from=time(10), time_to=time(14)
)
HOOK_URL = "https://hooks.example.com/shipping"
EVENTS = ["shipment.updated.status", "shipment.updated.waybill"]

Call = Callable[[AsyncShippingClient, int], Awaitable[Any]]

#: Every SDK method (both quote shapes, JSON and multipart orders, PUT and PATCH).
METHODS: dict[str, Call] = {
    "quotes.create": lambda c, i: c.quotes.create(quote_request()),
    "quotes.create hub": lambda c, i: c.quotes.create(quote_request(hub=True)),
    "quotes.get": lambda c, i: c.quotes.get(501),
    "orders.create": lambda c, i: c.orders.create(order_request(f"po-{i}")),
    "orders.create files": lambda c, i: c.orders.create(
        order_request(f"po-files-{i}"), files={"commercial_invoice": b"%PDF-1.4 invoice"}
    ),
    "orders.get": lambda c, i: c.orders.get(7001),
    "orders.cancel": lambda c, i: c.orders.cancel(7001),
    "orders.create_waybill": lambda c, i: c.orders.create_waybill(7001),
    "orders.pickup_availabilities": lambda c, i: c.orders.pickup_availabilities(7001),
    "orders.schedule_pickup": lambda c, i: c.orders.schedule_pickup(7001, WINDOW),
    "webhooks.create": lambda c, i: c.webhooks.create(HOOK_URL, EVENTS),
    "webhooks.get": lambda c, i: c.webhooks.get(77),
    "webhooks.update PUT": lambda c, i: c.webhooks.update(77, HOOK_URL, EVENTS),
    "webhooks.update PATCH": lambda c, i: c.webhooks.update(77, HOOK_URL, EVENTS, method="PATCH"),
    "webhooks.delete": lambda c, i: c.webhooks.delete(77),
}


def _undecoded(result: Any) -> int:
    if isinstance(result, list):
        return sum(_undecoded(item) for item in result)
    return len(getattr(result, "undecoded", ()))


async def drive(base_url: str, calls: int, *, decoding: str = "strict") -> dict[str, Tally]:
    """``calls`` calls of every SDK method against Prism at ``base_url``."""
    recorder = Recorder()
    tallies = {name: Tally() for name in METHODS}
    async with aiohttp.ClientSession(middlewares=(recorder,)) as session:
        client = AsyncShippingClient(
            TOKEN, base_url=base_url, session=session, decoding=decoding,  # type: ignore[arg-type]
            max_retries=0,
        )  # fmt: skip
        for name, call in METHODS.items():
            tally = tallies[name]
            for index in range(calls):
                seen = len(recorder.answers)
                tally.calls += 1
                try:
                    result = await call(client, index)
                except ShippingError as exc:
                    _classify(tally, exc)
                else:
                    tally.ok += 1
                    tally.undecoded_fields += _undecoded(result)
                answers = recorder.answers[seen:]
                if any(on_request for *_, on_request, _ in answers):
                    tally.refused += 1
                if any(on_answer for *_, on_answer in answers):
                    tally.answer_violations += 1
    return tallies


def _classify(tally: Tally, error: ShippingError) -> None:
    status = getattr(error, "status", None)
    if isinstance(error, OutcomeUnknownError) and status is not None and status < 300:
        tally.unknown_on_2xx += 1
    if isinstance(error, APIResponseValidationError):
        tally.decode_failures += 1
    elif isinstance(error, APIStatusError):
        tally.refused += 1  # Prism answers 4xx/5xx only to requests it refuses
    if not isinstance(error, APIResponseValidationError | APIStatusError):
        tally.other[type(error).__name__] += 1


def table(results: dict[str, dict[str, Tally]]) -> str:
    """One line per method and mode: calls, ok, decode failures, unknown on 2xx, refused."""
    lines = [
        f"{'method':<30} {'mode':<8} {'calls':>5} {'ok':>5} {'decode':>6} {'unk2xx':>6} "
        f"{'refused':>7} {'undecoded':>9} {'ans-viol':>8}"
    ]
    for mode, tallies in results.items():
        for name, t in tallies.items():
            lines.append(
                f"{name:<30} {mode:<8} {t.calls:>5} {t.ok:>5} {t.decode_failures:>6} "
                f"{t.unknown_on_2xx:>6} {t.refused:>7} {t.undecoded_fields:>9} "
                f"{t.answer_violations:>8}" + (f"  other: {dict(t.other)}" if t.other else "")
            )
    return "\n".join(lines)
