"""``client.quotes``: create a quote and read it back with its current validity."""

from __future__ import annotations

from typing import TYPE_CHECKING, Unpack

from shipping_async._decode import Answer
from shipping_async._http import RequestOptions, path_id
from shipping_async._retry import Operation
from shipping_async.models import Quote, QuoteRequest
from shipping_async.models._base import validated_json
from shipping_async.models.quotes import _QuoteEnvelope

if TYPE_CHECKING:
    from shipping_async._client import AsyncShippingClient

__all__ = ["Quotes"]


def _quote(envelope: _QuoteEnvelope) -> Quote:
    return envelope.unwrap()


# Both shapes occur: the direct quote flat, the hub quote wrapped in ``quote``.
_QUOTE = Answer(wire=_QuoteEnvelope, unwrap=_quote, strip=("quote",))
_CREATE = Operation(name="create_quote", method="POST", path="/quotes", route="/quotes")


class Quotes:
    """Quotes: estimates of several carrier services for one shipment."""

    __slots__ = ("_client",)

    def __init__(self, client: AsyncShippingClient) -> None:
        self._client = client

    async def create(self, request: QuoteRequest, **options: Unpack[RequestOptions]) -> Quote:
        """POST /quotes. ``hub_transit=True`` in the request asks for a hub quote.

        Raises ``NoHubForRouteError`` when no hub serves the lane (quote direct then).
        Retried like a read: a second quote commits the caller to nothing.
        """
        _, json = validated_json(request)
        quote = await self._client._request(_CREATE, _QUOTE, json=json, **options)
        self._remember(quote)
        return quote

    async def get(self, quote_id: int, **options: Unpack[RequestOptions]) -> Quote:
        """GET /quotes/{id}: the quote with each estimate's current ``quote_expired``."""
        path = f"/quotes/{path_id(quote_id, 'quote_id')}"
        operation = Operation(name="get_quote", method="GET", path=path, route="/quotes/{id}")
        quote = await self._client._request(operation, _QUOTE, **options)
        self._remember(quote)
        return quote

    def _remember(self, quote: Quote) -> None:
        # For orders.create: which quote to re-check after a long wait, and its age.
        estimates = [estimate.estimate_id for estimate in quote.estimates]
        self._client.estimates.note(quote.id, estimates, self._client.clock.monotonic())
