"""Helpers of the bulk tests: jobs, a client on a sandbox, the sandbox's order log, and
batch files."""

from __future__ import annotations

import csv
from collections import Counter
from decimal import Decimal
from pathlib import Path

from shipping_async._client import AsyncShippingClient
from shipping_async.bulk.jobs import OrderDetails, ShipmentJob
from shipping_async.limiter import RollingWindowLimiter
from shipping_async.models import Address, HSCode, Package, QuoteRequest
from shipping_async.sandbox import SandboxServer

EU = frozenset({276, 250, 528, 724, 380})


def make_job(reference: str, *, origin: int = 840, destination: int = 124) -> ShipmentJob:
    """A valid shipment; a hub job when the destination is in the EU."""
    sender = Address(
        name="Shipping Desk",
        address_1="1200 Harbor Blvd",
        city="Oakland",
        country_id=origin,
        export_code="EX-1",
    )
    receiver = Address(
        name="Lena Fischer", address_1="Torstrasse 101", city="Berlin", country_id=destination
    )
    quote = QuoteRequest(
        origin_country_id=origin,
        destination_country_id=destination,
        is_document=False,
        is_stackable=True,
        is_liftgate_required=False,
        purpose_of_shipment_id=1,
        is_shipment_protection_required=False,
        value_of_goods=Decimal("250.00"),
        value_of_goods_currency_id="USD",
        mass_unit="kg",
        distance_unit="cm",
        packages=[Package(weight=2.5, width=20, height=15, length=30)],
        hub_transit=destination in EU,
    )
    order = OrderDetails(
        origin_address=sender,
        destination_address=receiver,
        customer_reference=reference,
        description_of_contents="Hiking boots",
        hs_codes=[
            HSCode(
                code="6403.91",
                description="Hiking boots",
                quantity=2,
                cost=Decimal("125.00"),
                weight=2.5,
                country_id=origin,
            )
        ],
    )
    return ShipmentJob(quote=quote, order=order)


def make_jobs(count: int, prefix: str = "PO") -> list[ShipmentJob]:
    """``count`` jobs, every third one a hub job (US -> DE), the others US -> CA."""
    return [
        make_job(f"{prefix}-{index:04d}", destination=276 if index % 3 == 0 else 124)
        for index in range(count)
    ]


def client_for(
    sandbox: SandboxServer, *, limit: int = 20, window: float = 60.0, max_retries: int = 0
) -> AsyncShippingClient:
    """A client of ``sandbox`` on its clock, with the API's order budget."""
    limiter = RollingWindowLimiter(limit, window, clock=sandbox.clock)
    return AsyncShippingClient(
        sandbox.token,
        base_url=sandbox.base_url,
        order_limiter=limiter,
        clock=sandbox.clock,
        max_retries=max_retries,
        retry_base_delay=0.01,
        retry_max_delay=0.05,
    )


def orders_created(sandbox: SandboxServer) -> Counter[str]:
    """How many orders the sandbox created per customer_reference."""
    return Counter(
        record.customer_reference or ""
        for record in sandbox.control.requests(method="POST", path="/orders")
        if record.order_id is not None
    )


def statuses(sandbox: SandboxServer, method: str, path: str) -> Counter[int | None]:
    """Status codes the sandbox answered to ``method path``."""
    return Counter(record.status for record in sandbox.control.requests(method=method, path=path))


def write_csv(path: Path, rows: list[dict[str, str]], *, encoding: str = "utf-8") -> Path:
    """``rows`` as a CSV batch at ``path`` (the first row's names as the header)."""
    with path.open("w", newline="", encoding=encoding) as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path
