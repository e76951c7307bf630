"""Quotes, their carrier estimates, and the quote request."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Annotated, Any, Literal

import msgspec

from shipping_async.errors import RequestValidationError
from shipping_async.models._base import Model
from shipping_async.models.addresses import Address

__all__ = [
    "BillableWeight",
    "Estimate",
    "LineItem",
    "Package",
    "Quote",
    "QuoteRequest",
    "WeightBreakdown",
]


class LineItem(Model):
    """One cost line of an estimate. ``cost`` is a ``Decimal`` so that sums are exact."""

    description: str = ""
    cost: Decimal = Decimal(0)
    currency_id: str = ""


class WeightBreakdown(Model):
    """Weights in one unit system; ``billable_weight`` is max(actual, volumetric)."""

    packages: int | None = None
    mass_unit: str | None = None
    distance_unit: str | None = None
    volumetric_weight: float | None = None
    weight: float | None = None
    billable_weight: float | None = None


class BillableWeight(Model):
    """The billable weight in metric (kg, cm) and imperial (lb, inch) units."""

    metric: WeightBreakdown | None = None
    imperial: WeightBreakdown | None = None


class Estimate(Model):
    """One carrier service's estimate. Not a final price: the carrier fixes that later.

    For a hub quote ``estimate_id`` is the clearance leg's estimate and the line items
    already include the local leg. The API spells the weight key ``billable_weight`` or
    ``billable_weights``; both land in :attr:`billable_weight`.
    """

    estimate_id: int
    shipping_company: str = ""
    shipping_service: str = ""
    quote_expired: bool = False
    line_items: list[LineItem] = msgspec.field(default_factory=list)
    billable_weight: BillableWeight | None = None
    _billable_weights: BillableWeight | None = msgspec.field(default=None, name="billable_weights")

    def __post_init__(self) -> None:
        if self.billable_weight is None:
            self.billable_weight = self._billable_weights
        self._billable_weights = None

    @property
    def currencies(self) -> frozenset[str]:
        """The currencies the line items are in (most carriers price in USD only)."""
        return frozenset(item.currency_id for item in self.line_items)

    def total(self, currency: str | None = None) -> Decimal:
        """The exact sum of the line items.

        Raises ``ValueError`` when the items are in several currencies and no
        ``currency`` is named; with ``currency``, only items in it are summed.
        """
        if currency is None:
            if len(self.currencies) > 1:
                raise ValueError(
                    f"estimate {self.estimate_id} mixes currencies "
                    f"{sorted(self.currencies)}: name the one to sum"
                )
            return sum((item.cost for item in self.line_items), Decimal(0))
        return sum(
            (item.cost for item in self.line_items if item.currency_id == currency), Decimal(0)
        )

    @property
    def currency(self) -> str | None:
        """The single currency of the estimate, or ``None`` if it has none or several."""
        return next(iter(self.currencies)) if len(self.currencies) == 1 else None


class Quote(Model):
    """A quote: the estimates of several carrier services for one shipment.

    Both response shapes decode to this: the direct quote (flat) and the hub quote
    (wrapped in ``quote``, with ``hub_transit``, ``dirty`` and ``errors``).
    """

    id: int
    estimates: list[Estimate] = msgspec.field(default_factory=list)
    hub_transit: bool = False
    dirty: bool = False
    errors: list[Any] = msgspec.field(default_factory=list)

    def valid_estimates(self) -> list[Estimate]:
        """Estimates that have not expired."""
        return [estimate for estimate in self.estimates if not estimate.quote_expired]

    def estimate(self, estimate_id: int) -> Estimate:
        """The estimate with this id; ``KeyError`` if the quote has none."""
        for candidate in self.estimates:
            if candidate.estimate_id == estimate_id:
                return candidate
        raise KeyError(f"quote {self.id} has no estimate {estimate_id}")

    def cheapest(self, currency: str | None = None) -> Estimate:
        """The valid estimate with the lowest total (in ``currency`` if given)."""
        return cheapest(self.valid_estimates(), currency=currency, quote_id=self.id)


def cheapest(
    estimates: Iterable[Estimate], *, currency: str | None = None, quote_id: int | None = None
) -> Estimate:
    candidates = [
        estimate
        for estimate in estimates
        if currency is None or estimate.currency == currency or not estimate.line_items
    ]
    if currency is None:
        currencies = {estimate.currency for estimate in candidates}
        if len(currencies) > 1:
            raise ValueError(
                f"quote {quote_id}: estimates are in {sorted(map(str, currencies))}; "
                "name a currency to compare them in"
            )
    if not candidates:
        raise ValueError(f"quote {quote_id} has no valid estimate to choose from")
    return min(candidates, key=lambda estimate: estimate.total(estimate.currency))


class _QuoteEnvelope(Model):
    """Either response shape of a quote; ``unwrap`` gives the :class:`Quote`."""

    quote: Quote | None = None
    id: int | None = None
    estimates: list[Estimate] = msgspec.field(default_factory=list)
    hub_transit: bool = False
    dirty: bool = False
    errors: list[Any] = msgspec.field(default_factory=list)

    def unwrap(self) -> Quote:
        if self.quote is not None:
            return self.quote
        if self.id is None:
            raise ValueError("quote response has neither `quote` nor `id`")
        return Quote(
            id=self.id,
            estimates=self.estimates,
            hub_transit=self.hub_transit,
            dirty=self.dirty,
            errors=self.errors,
        )


_Dimension = Annotated[float, msgspec.Meta(gt=0, le=100_000)]
_CountryId = Annotated[int, msgspec.Meta(gt=0, lt=1000)]
_PositiveId = Annotated[int, msgspec.Meta(gt=0)]
_Currency = Annotated[str, msgspec.Meta(pattern=r"^[A-Z]{3}$")]


class Package(Model):
    """One package of a quote request, in the request's mass and distance units."""

    weight: _Dimension
    width: _Dimension
    height: _Dimension
    length: _Dimension


class QuoteRequest(Model):
    """The body of POST /quotes.

    >>> QuoteRequest(origin_country_id=840, destination_country_id=276, is_document=False,
    ...     is_stackable=True, is_liftgate_required=False, purpose_of_shipment_id=1,
    ...     is_shipment_protection_required=False, value_of_goods=Decimal("120.00"),
    ...     value_of_goods_currency_id="USD", mass_unit="kg", distance_unit="cm",
    ...     packages=[Package(weight=2, width=20, height=10, length=30)])  # doctest: +ELLIPSIS
    QuoteRequest(...)
    """

    origin_country_id: _CountryId
    destination_country_id: _CountryId
    is_document: bool
    is_stackable: bool
    is_liftgate_required: bool
    purpose_of_shipment_id: _PositiveId
    is_shipment_protection_required: bool
    value_of_goods: Decimal
    value_of_goods_currency_id: _Currency
    mass_unit: Literal["kg", "lb"]
    distance_unit: Literal["cm", "inch"]
    packages: Annotated[list[Package], msgspec.Meta(min_length=1)]
    origin_address: Address | None = None
    destination_address: Address | None = None
    hub_transit: bool = False

    def check(self) -> None:
        if not self.value_of_goods.is_finite() or self.value_of_goods < 0:
            raise RequestValidationError("value_of_goods", "must be a decimal >= 0")
