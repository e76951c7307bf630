"""One shipment of a batch: the quote request, the order details and the pickup wish."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any

import msgspec

from shipping_async.errors import RequestValidationError
from shipping_async.models import (
    Address,
    ClearanceDetail,
    HSCode,
    OrderRequest,
    PickupWish,
    QuoteRequest,
)

__all__ = ["InvalidJob", "OrderDetails", "ShipmentJob"]

# C0 and C1 controls, DEL and NUL: none belongs in a name, an address or a reference, and
# NUL is refused by PostgreSQL (a whole batch at once) but stored by SQLite. Refusing the
# job here makes both journals, the API and the terminal see the same thing.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# The same in JSON as msgspec writes it: C0 controls escaped (\n, \u001b), DEL and the C1
# controls raw in UTF-8. A literal backslash before one of these letters also matches;
# the exact check then finds nothing.
_MAYBE_CONTROL = re.compile(rb"\\[bfnrtu]|\x7f|\xc2[\x80-\x9f]")
_ENCODER = msgspec.json.Encoder()

_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]


class OrderDetails(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Everything of an order request except the estimate, which is chosen at run time."""

    origin_address: Address
    destination_address: Address
    customer_reference: _NonEmpty
    description_of_contents: _NonEmpty
    purpose_of_shipment_id: Annotated[int, msgspec.Meta(gt=0)] = 1
    pickup_instructions: str = ""
    hs_codes: list[HSCode] | None = None
    broker_address: Address | None = None
    importer_of_record_address: Address | None = None
    clearance_detail: ClearanceDetail | None = None

    def to_request(self, estimate_id: int) -> OrderRequest:
        """The POST /orders body for the chosen estimate."""
        return OrderRequest(
            origin_address=self.origin_address,
            destination_address=self.destination_address,
            pickup_instructions=self.pickup_instructions,
            purpose_of_shipment_id=self.purpose_of_shipment_id,
            quote_estimate_id=estimate_id,
            customer_reference=self.customer_reference,
            description_of_contents=self.description_of_contents,
            hs_codes=self.hs_codes,
            broker_address=self.broker_address,
            importer_of_record_address=self.importer_of_record_address,
            clearance_detail=self.clearance_detail,
        )


class ShipmentJob(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One shipment of a batch: quote it, order it, generate its waybills, book its pickup.

    ``key`` identifies the job in the journal (the unit of "nothing twice"); it defaults
    to ``order.customer_reference``, which therefore should be unique within a batch.
    ``account`` names the API account (its token and its order budget) the job ships on;
    one account is the empty string.
    """

    quote: QuoteRequest
    order: OrderDetails
    pickup: PickupWish | None = None
    key: str = ""
    account: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            self.key = self.order.customer_reference
        data = _ENCODER.encode(self)
        # Each match of _MAYBE_CONTROL starts with one of these bytes; a substring test
        # (memchr) over the JSON is several times quicker than the regex's search.
        if b"\\" not in data and b"\x7f" not in data and b"\xc2" not in data:
            return  # the common case, at a tenth of the cost of walking every string
        if _MAYBE_CONTROL.search(data) is None:
            return
        for path, text in _texts(msgspec.to_builtins(self, enc_hook=str), ""):
            found = _CONTROL.search(text)
            if found is not None:
                raise RequestValidationError(
                    path,
                    f"holds the control character {found[0]!r}; control characters and "
                    "NUL are not allowed in any text",
                )


def _texts(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every string of a builtins tree, with its path (``order.origin_address.name``)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for name, item in value.items():
            yield from _texts(item, f"{path}.{name}" if path else str(name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _texts(item, f"{path}[{index}]")


class InvalidJob(msgspec.Struct, frozen=True, kw_only=True):
    """An input row that is not a valid job: it becomes a failed result, the others go on."""

    key: str
    row: int | None
    error: str
