"""Shared by the scale-out tests: shipment jobs the sandbox accepts."""

from __future__ import annotations

from decimal import Decimal

from shipping_async.bulk.jobs import OrderDetails, ShipmentJob
from shipping_async.models import Address, Package, QuoteRequest


def make_job(key: str, account: str = "") -> ShipmentJob:
    """A US -> DE shipment of one package, keyed ``key`` (its customer reference)."""
    origin = Address(
        name="Ada Lovelace", address_1="1 Main Street", city="New York", country_id=840
    )
    destination = Address(
        name="Emmy Noether", address_1="2 Hauptstr.", city="Berlin", country_id=276
    )
    return ShipmentJob(
        quote=QuoteRequest(
            origin_country_id=840,
            destination_country_id=276,
            is_document=False,
            is_stackable=True,
            is_liftgate_required=False,
            purpose_of_shipment_id=1,
            is_shipment_protection_required=False,
            value_of_goods=Decimal("120.00"),
            value_of_goods_currency_id="USD",
            mass_unit="kg",
            distance_unit="cm",
            packages=[Package(weight=2, width=20, height=10, length=30)],
        ),
        order=OrderDetails(
            origin_address=origin,
            destination_address=destination,
            customer_reference=key,
            description_of_contents="books",
        ),
        account=account,
    )
