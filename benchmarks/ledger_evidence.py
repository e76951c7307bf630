"""Benchmark: what ``settle_from_webhooks`` adds to one ``order_received`` delivery.

A sandbox (in process, on loopback) holds ``--orders`` orders made by another app (so
each is a candidate the ledger reads once with ``GET /orders/{id}``). Their
``order_received`` deliveries go through ``WebhookReceiver.receive`` one at a time: without
the ledger's recorder, then with it and 0, 1 and 10 references unresolved in a SQLite
ledger (each delivery is recorded, then waits for the pass that settles from it). The
ledger runs on the real clock, so every delivery falls in every unresolved reference's
window, as it would beside the real API. Real milliseconds per delivery.

    .venv/bin/python benchmarks/ledger_evidence.py [--orders 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import msgspec

from shipping_async import (
    Address,
    AsyncShippingClient,
    EstimateExpiredError,
    OrderRequest,
    Package,
    QuoteRequest,
    SQLiteOrderLedger,
    settle_from_webhooks,
)
from shipping_async.sandbox import SandboxServer
from shipping_async.webhooks import WebhookEvent, WebhookReceiver

TOKEN = "whk_benchmark"


def body(order_id: int) -> bytes:
    return msgspec.json.encode(
        {
            "object_type": "order",
            "object_id": order_id,
            "event_type": "shipment.updated.status",
            "original_value": "",
            "updated_value": "order_received",
            "updated_at_utc": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "token": TOKEN,
        }
    )


async def other_apps_orders(sandbox: SandboxServer, count: int) -> list[int]:
    place = Address(name="Desk", address_1="1 Harbor", city="Oakland", country_id=840)
    away = Address(name="Lena", address_1="Torstr 1", city="Berlin", country_id=276)
    ids: list[int] = []
    async with AsyncShippingClient(
        sandbox.token, base_url=sandbox.base_url, clock=sandbox.clock
    ) as client:
        while len(ids) < count:
            quote = await client.quotes.create(
                QuoteRequest(
                    origin_country_id=840, destination_country_id=276, is_document=False,
                    is_stackable=True, is_liftgate_required=False, purpose_of_shipment_id=1,
                    is_shipment_protection_required=False, value_of_goods=Decimal("120.00"),
                    value_of_goods_currency_id="USD", mass_unit="kg", distance_unit="cm",
                    packages=[Package(weight=2, width=20, height=10, length=30)],
                )
            )  # fmt: skip
            request = OrderRequest(
                origin_address=place, destination_address=away, purpose_of_shipment_id=1,
                quote_estimate_id=quote.estimates[0].estimate_id, description_of_contents="Books",
                customer_reference=f"OTHER-{len(ids)}", pickup_instructions="",
            )  # fmt: skip
            try:
                ids.append((await client.orders.create(request)).id)
            except EstimateExpiredError:
                continue  # waited a window on the sandbox's fast clock: quote again
    return ids


async def run(sandbox: SandboxServer, ids: list[int], unresolved: int | None) -> list[float]:
    """Milliseconds per delivery; ``unresolved=None``: the receiver without the ledger."""

    async def handler(event: WebhookEvent) -> None:
        return None

    receiver = WebhookReceiver(handler, token=TOKEN)
    async with AsyncExitStack() as stack:
        if unresolved is not None:
            directory = stack.enter_context(tempfile.TemporaryDirectory())
            ledger = await SQLiteOrderLedger.open(Path(directory) / "orders.ledger")
            stack.push_async_callback(ledger.aclose)
            client = await stack.enter_async_context(
                AsyncShippingClient(sandbox.token, base_url=sandbox.base_url, order_ledger=ledger)
            )
            for n in range(unresolved):
                await ledger.claim(f"UNKNOWN-{n}")
                await ledger.record_unknown(f"UNKNOWN-{n}", "status 502")
            await stack.enter_async_context(settle_from_webhooks(client, receiver))
        took: list[float] = []
        for order_id in ids:
            started = time.perf_counter()
            answer = await receiver.receive(body(order_id))
            took.append((time.perf_counter() - started) * 1000)
            assert answer.status == 200, answer
    return took


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=200)
    args = parser.parse_args()
    async with SandboxServer(speed=1000) as sandbox:
        ids = await other_apps_orders(sandbox, args.orders)
        print("| receiver | unresolved references | deliveries | median ms | p99 ms |")
        print("|---|---:|---:|---:|---:|")
        for unresolved in (None, 0, 1, 10):
            took = sorted(await run(sandbox, ids, unresolved))
            p99 = took[max(0, int(len(took) * 0.99) - 1)]
            what = "without the ledger" if unresolved is None else "settle_from_webhooks"
            shown = "-" if unresolved is None else str(unresolved)
            print(f"| {what} | {shown} | {len(took)} | {statistics.median(took):.2f} | {p99:.2f} |")
            sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
