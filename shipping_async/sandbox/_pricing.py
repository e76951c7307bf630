"""Estimates: carriers and their tariffs, billable weight, line items, currency conversion.

Everything here is deterministic: the same quote request always prices the same, so tests
can compare figures. Amounts are :class:`~decimal.Decimal` and rounded to cents only when
they reach the wire.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from decimal import ROUND_HALF_UP, Decimal

import msgspec

from shipping_async.sandbox.countries import Country

__all__ = [
    "CARRIER_SERVICES",
    "CURRENCY_RATES_TO_USD",
    "PURPOSES",
    "CarrierService",
    "LineItem",
    "WeightBreakdown",
    "Weights",
    "billable_weights",
    "carrier_code",
    "cents",
    "combine_legs",
    "convert",
    "local_leg_items",
    "price_leg",
]

#: Purpose of shipment ids accepted by quotes and orders.
PURPOSES: dict[int, str] = {
    1: "Sale of goods",
    2: "Gift",
    3: "Commercial sample",
    4: "Repair or return",
    5: "Personal effects",
}

#: Fixed conversion table: how many USD one unit of each currency buys.
CURRENCY_RATES_TO_USD: dict[str, Decimal] = {
    code: Decimal(rate)
    for code, rate in {
        "USD": "1", "EUR": "1.08", "GBP": "1.27", "CAD": "0.74", "MXN": "0.058",
        "CHF": "1.13", "SEK": "0.095", "NOK": "0.094", "DKK": "0.145", "PLN": "0.25",
        "CZK": "0.043", "JPY": "0.0067", "CNY": "0.14", "HKD": "0.128", "SGD": "0.74",
        "AUD": "0.66", "NZD": "0.61", "KRW": "0.00075", "INR": "0.012", "BRL": "0.20",
        "AED": "0.2723",
    }.items()
}  # fmt: skip

_CENT = Decimal("0.01")
_LB_PER_KG = 2.20462262
_CM_PER_INCH = 2.54
# Volumetric divisors: cm3 per kg in metric, cubic inches per lb in imperial.
_DIVISOR = {"metric": 5000.0, "imperial": 139.0}
_UNITS = {"metric": ("kg", "cm"), "imperial": ("lb", "inch")}


def cents(amount: Decimal | float) -> Decimal:
    """Round to two decimals, half up, as every amount and weight on the wire is."""
    value = amount if isinstance(amount, Decimal) else Decimal(repr(amount))
    return value.quantize(_CENT, rounding=ROUND_HALF_UP)


def convert(amount: Decimal, source: str, target: str) -> Decimal:
    """Convert between currencies through the fixed USD table."""
    if source == target:
        return amount
    return amount * CURRENCY_RATES_TO_USD[source] / CURRENCY_RATES_TO_USD[target]


class WeightBreakdown(msgspec.Struct, frozen=True, kw_only=True):
    """The WeightBreakdown of spec 2.2, in one unit system."""

    packages: int
    mass_unit: str
    distance_unit: str
    volumetric_weight: Decimal
    weight: Decimal
    billable_weight: Decimal


class Weights(msgspec.Struct, frozen=True, kw_only=True):
    """Billable weight in both unit systems (the ``billable_weight`` object of an estimate)."""

    metric: WeightBreakdown
    imperial: WeightBreakdown

    @property
    def billable_kg(self) -> float:
        return float(self.metric.billable_weight)


class LineItem(msgspec.Struct, frozen=True):
    """One cost line of an estimate, unrounded until it is shown."""

    description: str
    cost: Decimal
    currency_id: str


def billable_weights(
    packages: Sequence[tuple[float, float, float, float]], mass_unit: str, distance_unit: str
) -> Weights:
    """Billable weight: per package the higher of actual and volumetric weight, summed.

    ``packages`` holds ``(weight, length, width, height)`` in the request's units. The
    figures are computed in the request's system (chosen by ``mass_unit``; dimensions are
    converted into it when ``distance_unit`` belongs to the other one) and the other
    system's breakdown is the same figures converted, so both always describe one decision.
    """
    system = "metric" if mass_unit == "kg" else "imperial"
    length_factor = 1.0
    if distance_unit == "inch" and system == "metric":
        length_factor = _CM_PER_INCH
    elif distance_unit == "cm" and system == "imperial":
        length_factor = 1 / _CM_PER_INCH
    actual = volumetric = billable = 0.0
    for weight, length, width, height in packages:
        volume = (length * length_factor) * (width * length_factor) * (height * length_factor)
        package_volumetric = volume / _DIVISOR[system]
        actual += weight
        volumetric += package_volumetric
        billable += max(weight, package_volumetric)
    to_other = 1 / _LB_PER_KG if system == "imperial" else _LB_PER_KG
    primary = _breakdown(system, len(packages), actual, volumetric, billable)
    other_system = "imperial" if system == "metric" else "metric"
    other = _breakdown(
        other_system,
        len(packages),
        actual * to_other,
        volumetric * to_other,
        billable * to_other,
    )
    if system == "metric":
        return Weights(metric=primary, imperial=other)
    return Weights(metric=other, imperial=primary)


def _breakdown(
    system: str, count: int, actual: float, volumetric: float, billable: float
) -> WeightBreakdown:
    mass_unit, distance_unit = _UNITS[system]
    return WeightBreakdown(
        packages=count,
        mass_unit=mass_unit,
        distance_unit=distance_unit,
        volumetric_weight=cents(volumetric),
        weight=cents(actual),
        billable_weight=cents(billable),
    )


class CarrierService(msgspec.Struct, frozen=True, kw_only=True):
    """One carrier service and its tariff (amounts in the carrier's ``currency``)."""

    carrier: str
    service: str
    currency: str
    base: Decimal
    per_kg: Decimal
    fuel_rate: Decimal


def _service(
    carrier: str, service: str, currency: str, base: str, per_kg: str, fuel: str
) -> CarrierService:
    return CarrierService(
        carrier=carrier,
        service=service,
        currency=currency,
        base=Decimal(base),
        per_kg=Decimal(per_kg),
        fuel_rate=Decimal(fuel),
    )


#: The services every quote prices, in this order. EuroPost prices in EUR: "most
#: estimates are in USD but this can vary by carrier".
CARRIER_SERVICES: tuple[CarrierService, ...] = (
    _service("Parcel Express", "Express", "USD", "45.00", "9.50", "0.18"),
    _service("Parcel Express", "Economy", "USD", "25.00", "5.20", "0.15"),
    _service("Global Freight", "Standard", "USD", "35.00", "6.80", "0.16"),
    _service("EuroPost", "Priority", "EUR", "30.00", "7.00", "0.12"),
    _service("EuroPost", "Economy", "EUR", "18.00", "4.10", "0.10"),
)

_LOCAL_BASE = Decimal("8.00")
_LOCAL_PER_KG = Decimal("1.20")
_LOCAL_FUEL = Decimal("0.10")
_HUB_HANDLING = Decimal("12.00")
_LIFTGATE_USD = Decimal("40.00")
_PROTECTION_RATE = Decimal("0.015")
_PROTECTION_MINIMUM_USD = Decimal("5.00")


def carrier_code(carrier: str) -> str:
    """The carrier's initials, used as the prefix of its waybills: ``Parcel Express`` -> PE."""
    return "".join(word[0] for word in carrier.split()).upper()


def _zone_factor(origin: Country, destination: Country) -> Decimal:
    if origin.id == destination.id:
        return Decimal("0.6")
    if origin.region == destination.region:
        return Decimal("1.0")
    return Decimal("1.6")


def price_leg(
    service: CarrierService,
    *,
    origin: Country,
    destination: Country,
    billable_kg: float,
    is_document: bool,
    is_stackable: bool,
    is_liftgate_required: bool,
    protected_value_usd: Decimal | None,
) -> list[LineItem]:
    """Line items of one carrier service on one lane, in the carrier's currency."""
    kg = Decimal(repr(billable_kg))
    freight = (service.base + service.per_kg * kg) * _zone_factor(origin, destination)
    if is_document:
        freight *= Decimal("0.6")
    items = [
        LineItem("Freight", freight, service.currency),
        LineItem("Fuel surcharge", freight * service.fuel_rate, service.currency),
    ]
    if not is_stackable:
        items.append(LineItem("Non-stackable handling", freight / 10, service.currency))
    if is_liftgate_required:
        cost = convert(_LIFTGATE_USD, "USD", service.currency)
        items.append(LineItem("Liftgate", cost, service.currency))
    if protected_value_usd is not None:
        premium = max(protected_value_usd * _PROTECTION_RATE, _PROTECTION_MINIMUM_USD)
        cost = convert(premium, "USD", service.currency)
        items.append(LineItem("Shipment protection", cost, service.currency))
    return items


def local_leg_items(*, billable_kg: float, currency: str) -> list[LineItem]:
    """Line items of a hub's local leg (hub to destination), in the hub's currency."""
    freight = convert(_LOCAL_BASE + _LOCAL_PER_KG * Decimal(repr(billable_kg)), "EUR", currency)
    return [
        LineItem("Freight", freight, currency),
        LineItem("Fuel surcharge", freight * _LOCAL_FUEL, currency),
        LineItem("Hub handling", convert(_HUB_HANDLING, "EUR", currency), currency),
    ]


def combine_legs(legs: Iterable[Sequence[LineItem]], currency: str) -> list[LineItem]:
    """Sum the legs' items grouped by description, converted into ``currency``.

    Groups keep the order in which descriptions first appear (clearance leg first).
    """
    totals: dict[str, Decimal] = {}
    for items in legs:
        for item in items:
            amount = convert(item.cost, item.currency_id, currency)
            totals[item.description] = totals.get(item.description, Decimal(0)) + amount
    return [LineItem(description, cost, currency) for description, cost in totals.items()]
