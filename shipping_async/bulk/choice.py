"""Choosing one estimate of a quote: the cheapest in one currency, a carrier, a service."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from shipping_async.models import Estimate, Quote

__all__ = ["EstimateChooser", "by_service", "cheapest", "parse_choice"]

#: Any callable from a quote to the estimate to order; it raises ``ValueError`` when
#: none fits (the job then fails at the quote stage, not retryable).
EstimateChooser = Callable[[Quote], Estimate]

_ZERO = Decimal(0)


def cheapest(currency: str | None = None) -> EstimateChooser:
    """The valid estimate with the lowest total among those priced in ``currency``.

    Totals in different currencies are never compared. Without ``currency`` the quote's
    most common currency is used (ties go to the alphabetically first), which is the
    account currency for most quotes: a carrier pricing in EUR is then left out.
    """

    def choose(quote: Quote) -> Estimate:
        # Every job chooses once: each estimate's currency is worked out once here
        # (Estimate.currency builds a set of its line items' currencies at each call).
        valid: list[tuple[Estimate, str]] = []
        for estimate in quote.estimates:
            if not estimate.quote_expired:
                priced_in = _single_currency(estimate)
                if priced_in:
                    valid.append((estimate, priced_in))
        if not valid:
            raise ValueError(f"quote {quote.id} has no valid estimate in a single currency")
        wanted = currency
        if wanted is None:
            tally: dict[str, int] = {}
            for _, priced_in in valid:
                tally[priced_in] = tally.get(priced_in, 0) + 1
            wanted = next(iter(tally)) if len(tally) == 1 else _most_common(tally)
        # The first of the lowest totals, as min() picks it. Every line item of these is
        # in ``wanted``: the total is their plain sum, ``Estimate.total(wanted)``.
        chosen: Estimate | None = None
        lowest = _ZERO
        for estimate, priced_in in valid:
            if priced_in == wanted:
                total = sum([item.cost for item in estimate.line_items], _ZERO)
                if chosen is None or total < lowest:
                    chosen, lowest = estimate, total
        if chosen is None:
            raise ValueError(f"quote {quote.id} has no valid estimate in {wanted}")
        return chosen

    return choose


def _most_common(tally: dict[str, int]) -> str:
    """The currency most estimates are priced in; a tie goes to the alphabetically first."""
    most = max(tally.values())
    return min(code for code, count in tally.items() if count == most)


def _single_currency(estimate: Estimate) -> str | None:
    """:attr:`Estimate.currency` without the set: the one currency of every line item, or
    ``None`` when there is none or several."""
    items = estimate.line_items
    if not items:
        return None
    first = items[0].currency_id
    for item in items:
        if item.currency_id != first:
            return None
    return first


def by_service(
    carrier: str | None = None, service: str | None = None, *, currency: str | None = None
) -> EstimateChooser:
    """The cheapest valid estimate of ``carrier`` and/or ``service`` (case-insensitive)."""

    def matches(estimate: Estimate) -> bool:
        return (carrier is None or estimate.shipping_company.casefold() == carrier.casefold()) and (
            service is None or estimate.shipping_service.casefold() == service.casefold()
        )

    def choose(quote: Quote) -> Estimate:
        fitting = [estimate for estimate in quote.valid_estimates() if matches(estimate)]
        if not fitting:
            wanted = " ".join(part for part in (carrier, service) if part)
            offered = sorted(
                f"{estimate.shipping_company} {estimate.shipping_service}"
                for estimate in quote.valid_estimates()
            )
            raise ValueError(f"quote {quote.id} has no valid {wanted} estimate; offered: {offered}")
        narrowed = Quote(id=quote.id, estimates=fitting)
        return cheapest(currency)(narrowed)

    return choose


def parse_choice(text: str) -> EstimateChooser:
    """Read a ``--choose`` value.

    ``cheapest``, ``cheapest:EUR``, ``carrier:EuroPost``, ``service:Economy``,
    ``carrier:EuroPost,service:Economy`` (the cheapest of what matches).
    """
    text = text.strip()
    if text == "cheapest":
        return cheapest()
    if text.startswith("cheapest:"):
        return cheapest(text.partition(":")[2].strip().upper())
    parts: dict[str, str] = {}
    for part in text.split(","):
        name, sep, value = part.partition(":")
        if not sep or name.strip() not in ("carrier", "service") or not value.strip():
            raise ValueError(
                f"--choose {text!r}: expected cheapest, cheapest:CUR, carrier:NAME, "
                "service:NAME or carrier:NAME,service:NAME"
            )
        parts[name.strip()] = value.strip()
    return by_service(parts.get("carrier"), parts.get("service"))
