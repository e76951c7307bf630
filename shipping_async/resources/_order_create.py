"""One order creation for a web app: the ledger's claim, the request, and what is recorded.

The flow of :meth:`Orders.create <shipping_async.resources.orders.Orders.create>`:

1. With an order ledger, claim the ``customer_reference``. Already ordered: return that
   order, send nothing. Claimed before and unresolved (in flight elsewhere, or its answer
   lost): raise ``OrderOutcomeUnknownError``, send nothing.
2. Send under the limiter and the retry rules (``max_wait`` bounds the permit wait).
3. Record what the answer says: the order (with the API's answer, to return it again),
   an unknown outcome, or nothing (the reference is free again).
4. A caller cancelled meanwhile: before the wire, nothing was sent; after, the answer was
   read anyway (see :mod:`shipping_async._order_wait`). Either way the outcome is
   recorded, logged and passed to ``on_cancelled_order``, then the cancellation goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import aiohttp
import msgspec

from shipping_async._decode import Answer
from shipping_async._order_wait import run_to_the_end
from shipping_async._retry import Operation, never_written
from shipping_async.errors import (
    APIError,
    APIStatusError,
    InternalServerError,
    OrderOutcomeUnknownError,
    ShippingError,
)
from shipping_async.models import Order

if TYPE_CHECKING:
    from shipping_async._client import AsyncShippingClient
    from shipping_async.ledger import LedgerEntry, OrderLedger

__all__ = ["CancelledOrder", "CancelledOutcome", "create_order"]

_log = logging.getLogger("shipping_async")

#: ``created``: the order exists (``order``); ``not_created``: the API refused it (a 4xx
#: such as a 429); ``not_sent``: no request reached the API; ``unknown``: sent, no usable
#: answer (a 5xx, a reset, a timeout): look before creating it again.
CancelledOutcome = Literal["created", "not_created", "not_sent", "unknown"]


class CancelledOrder(msgspec.Struct, frozen=True, kw_only=True):
    """What became of an ``orders.create`` whose caller was cancelled."""

    customer_reference: str
    outcome: CancelledOutcome
    order: Order | None = None
    error: BaseException | None = None

    @property
    def order_id(self) -> int | None:
        """The created order's id, when ``outcome == "created"``."""
        return self.order.id if self.order is not None else None


def _classify(outcome: object) -> CancelledOutcome:
    """What ``outcome`` (an order, an error, ``None`` for "never sent") says was created."""
    if outcome is None:
        return "not_sent"
    if isinstance(outcome, Order):
        return "created"
    if isinstance(outcome, BaseException):
        if never_written(outcome):
            return "not_sent"
        if isinstance(outcome, ShippingError) and not isinstance(outcome, APIError):
            return "not_sent"  # no permit in time, limiter unreachable: refused here
        if isinstance(outcome, APIStatusError) and not isinstance(outcome, InternalServerError):
            return "not_created"
    # 5xx (a gateway may answer after the order was made), resets, timeouts, bugs.
    return "unknown"


def _unresolved(entry: LedgerEntry, operation: Operation) -> OrderOutcomeUnknownError:
    reference = entry.customer_reference
    if entry.state == "sending":
        why = "an earlier create of it is still in flight, or its process stopped mid-request"
    else:
        why = f"an earlier create of it got no usable answer ({entry.detail or 'unknown'})"
    return OrderOutcomeUnknownError(
        f"customer_reference {reference!r} is in the order ledger unresolved: {why}. Nothing "
        "was sent now. Check whether the order exists, then settle it with "
        f"client.orders.resolve({reference!r}, order_id=ID or None).",
        method=operation.method,
        path=operation.path,
        customer_reference=reference,
    )


async def _record(ledger: OrderLedger | None, reference: str, outcome: object, raw: bytes) -> None:
    if ledger is None:
        return
    if isinstance(outcome, Order):
        await ledger.record_order(reference, outcome.id, raw)
    elif outcome is not None and _classify(outcome) == "unknown":
        await ledger.record_unknown(reference, _describe(outcome))
    else:
        await ledger.forget(reference)


def _describe(outcome: object) -> str:
    if isinstance(outcome, APIStatusError):
        return f"status {outcome.status}"
    if isinstance(outcome, BaseException):
        cause = outcome.__cause__
        return type(cause if cause is not None else outcome).__name__
    return "cancelled"


async def _tell(client: AsyncShippingClient, report: CancelledOrder) -> None:
    what = {
        "created": f"order {report.order_id} was created",
        "not_created": f"the API refused it ({_describe(report.error)}); no order was created",
        "not_sent": "nothing was sent; no order was created",
        "unknown": f"the outcome is unknown ({_describe(report.error)}): the order may exist",
    }[report.outcome]
    level = logging.INFO if report.outcome in ("not_sent", "not_created") else logging.WARNING
    _log.log(
        level,
        "orders.create for customer_reference %r was cancelled by its caller: %s",
        report.customer_reference,
        what,
    )
    callback = client.on_cancelled_order
    if callback is None:
        return
    try:
        result = callback(report)
        if inspect.isawaitable(result):
            await result
    except Exception:
        _log.exception("on_cancelled_order failed for %r", report.customer_reference)


async def create_order(
    client: AsyncShippingClient,
    operation: Operation,
    answer: Answer[Any, Order],
    *,
    json: bytes | None,
    form: Callable[[], aiohttp.FormData] | None,
    recheck: Callable[[float], Awaitable[None] | None],
    decode: Callable[[bytes], Order],
    max_wait: float | None,
    options: Mapping[str, Any],
) -> Order:
    """Steps 1-4 of the module docstring: ``operation`` sent with the body ``json`` (or
    ``form``) and read as ``answer``, ``recheck`` before each attempt (the client's
    ``before_send``); ``decode`` reads an answer the ledger kept."""
    reference = operation.customer_reference
    assert reference is not None
    ledger = client.order_ledger
    if ledger is not None:
        entry = await _claim(ledger, reference)
        if entry is not None:
            return await _replay(client, entry, operation, decode)
    answers: list[bytes] = []

    settled = False

    async def settle(outcome: object) -> None:
        nonlocal settled
        settled = True
        await _record(ledger, reference, outcome, answers[-1] if answers else b"")
        error = outcome if isinstance(outcome, BaseException) else None
        order = outcome if isinstance(outcome, Order) else None
        report = CancelledOrder(
            customer_reference=reference, outcome=_classify(outcome), order=order, error=error
        )
        await _tell(client, report)

    try:
        order: Order = await client._request(
            operation,
            answer,
            json=json,
            form=form,
            order_limited=True,
            max_wait=max_wait,
            settle=settle,
            # Only the ledger keeps answers.
            raw_sink=answers.append if ledger is not None else None,
            before_send=recheck,
            **options,
        )
    except asyncio.CancelledError:
        if not settled:  # cancelled before the wire (or between 429 re-sends)
            await run_to_the_end(settle(None))
        raise
    except BaseException as exc:
        if ledger is not None:
            await run_to_the_end(_record(ledger, reference, exc, b""))
        raise
    if ledger is not None:
        await run_to_the_end(ledger.record_order(reference, order.id, answers[-1]))
    return order


async def _claim(ledger: OrderLedger, reference: str) -> LedgerEntry | None:
    """``ledger.claim``, and a claim made for a caller cancelled meanwhile given back."""
    claim = asyncio.ensure_future(ledger.claim(reference))
    try:
        return await asyncio.shield(claim)
    except asyncio.CancelledError:
        # The store may have written the claim anyway: if it is ours, nothing was sent,
        # so free the reference (else it would stay "in flight" for good).
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await run_to_the_end(asyncio.wait([claim]))
            ours = not claim.cancelled() and claim.exception() is None and claim.result() is None
            if ours:
                await run_to_the_end(ledger.forget(reference))
        raise


async def _replay(
    client: AsyncShippingClient,
    entry: LedgerEntry,
    operation: Operation,
    decode: Callable[[bytes], Order],
) -> Order:
    if entry.state != "ordered" or entry.order_id is None:
        raise _unresolved(entry, operation)
    if entry.answer:
        return decode(entry.answer)
    # Resolved by hand with only an id: fetch it once and keep the answer.
    return await client.orders.get(entry.order_id)
