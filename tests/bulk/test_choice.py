"""Choosing an estimate: the chooser works each estimate's currency out once, and chooses
exactly as the plain reading of its rule (kept here as the reference) does."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shipping_async.bulk.choice import cheapest
from shipping_async.models import Estimate, Quote
from shipping_async.models.quotes import LineItem


def reference(quote: Quote, currency: str | None) -> Estimate:
    """The rule as first written, with ``Estimate.currency`` asked at every step."""
    valid = [estimate for estimate in quote.valid_estimates() if estimate.currency]
    if not valid:
        raise ValueError(f"quote {quote.id} has no valid estimate in a single currency")
    wanted = currency
    if wanted is None:
        tally = Counter(estimate.currency for estimate in valid)
        wanted = min(tally, key=lambda code: (-tally[code], code or ""))
    priced = [estimate for estimate in valid if estimate.currency == wanted]
    if not priced:
        raise ValueError(f"quote {quote.id} has no valid estimate in {wanted}")
    return min(priced, key=lambda estimate: estimate.total(wanted))


CODES = st.sampled_from(["", "USD", "EUR", "GBP", "usd"])
ITEMS = st.builds(
    LineItem,
    cost=st.decimals(min_value=-10, max_value=1000, places=2, allow_nan=False),
    currency_id=CODES,
)
ESTIMATES = st.builds(
    Estimate,
    estimate_id=st.integers(1, 10**6),
    quote_expired=st.booleans(),
    line_items=st.lists(ITEMS, max_size=4),
)


def outcome(choose: object, quote: Quote) -> object:
    try:
        return choose(quote)  # type: ignore[operator]
    except ValueError as exc:
        return str(exc)


@given(estimates=st.lists(ESTIMATES, max_size=6), currency=st.none() | CODES)
def test_the_chooser_picks_what_the_rule_says_on_any_quote(
    estimates: list[Estimate], currency: str | None
) -> None:
    quote = Quote(id=7, estimates=estimates)
    expected = outcome(lambda q: reference(q, currency), quote)
    got = outcome(cheapest(currency), quote)
    if isinstance(expected, str):
        assert got == expected
    else:
        assert got is expected  # the same estimate, not only an equal one


@pytest.mark.parametrize(
    ("items", "chosen"),
    [
        pytest.param([[("10", "USD")], [("9", "USD")], [("1", "EUR")]], 1, id="most-common"),
        pytest.param([[("10", "USD"), ("1", "EUR")], [("12", "USD")]], 1, id="mixed-left-out"),
        pytest.param([[("5", "EUR")], [("6", "USD")]], 0, id="tie-alphabetical"),
    ],
)
def test_the_cheapest_in_the_most_common_currency(
    items: list[list[tuple[str, str]]], chosen: int
) -> None:
    estimates = [
        Estimate(
            estimate_id=index,
            line_items=[LineItem(cost=Decimal(cost), currency_id=code) for cost, code in lines],
        )
        for index, lines in enumerate(items)
    ]
    assert cheapest()(Quote(id=1, estimates=estimates)).estimate_id == chosen
