"""The control API (``/_sandbox/...``) and :class:`SandboxControl`, its in-process twin.

Both move orders through statuses the public API cannot reach, inject faults, read the
request log and the webhook delivery attempts, and reset the sandbox. They share the
bearer token of the API.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import msgspec
from aiohttp import web

from shipping_async.sandbox._core import SANDBOX_KEY, Sandbox
from shipping_async.sandbox._delivery import DeliveryRecord
from shipping_async.sandbox._faults import Fault
from shipping_async.sandbox._log import RequestRecord
from shipping_async.sandbox._schemas import FaultKind, FaultRequest, StatusChangeRequest
from shipping_async.sandbox._state import ORDER_STATUSES
from shipping_async.sandbox._wire import (
    error_response,
    json_response,
    order_wire,
    success_response,
)

__all__ = ["CONTROL_PREFIX", "SandboxControl", "SandboxControlError", "routes"]

CONTROL_PREFIX = "/_sandbox"


class SandboxControlError(ValueError):
    """A control request the sandbox cannot carry out; ``status`` is its HTTP answer."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class SandboxControl:
    """The powers of the control API, in process.

    >>> async with SandboxServer(speed=1000) as sandbox:  # doctest: +SKIP
    ...     sandbox.control.set_status(order_id, "in_transit")
    ...     sandbox.control.add_fault("drop_after", "/orders", method="POST")
    """

    __slots__ = ("_sandbox",)

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    def set_status(self, order_id: int, status: str, *, leg: int | None = None) -> dict[str, Any]:
        """Move every leg (or leg ``leg``) to ``status``; fires the events of spec 6.

        Returns the order as GET /orders/{id} shows it (without the ``order`` wrapper).
        """
        order = self._sandbox.store.orders.get(order_id)
        if order is None:
            raise SandboxControlError(f"Order with id {order_id} not found", status=404)
        if status not in ORDER_STATUSES:
            raise SandboxControlError(f"status must be one of {', '.join(ORDER_STATUSES)}")
        if leg is not None and not 0 <= leg < len(order.legs):
            raise SandboxControlError(f"leg must be between 0 and {len(order.legs) - 1}")
        indices = range(len(order.legs)) if leg is None else (leg,)
        moved = self._sandbox.clock.now()  # legs moved together fire identical events
        for index in indices:
            self._sandbox.set_leg_status(order, index, status, at=moved)
        if all(item.status == "delivered" for item in order.legs):
            order.date_delivered = order.date_delivered or self._sandbox.clock.now()
        return order_wire(order)

    def add_fault(
        self,
        kind: FaultKind,
        path: str,
        *,
        method: str = "*",
        count: int = 1,
        status: int | None = None,
        seconds: float | None = None,
        message: str | None = None,
    ) -> Fault:
        """Inject a fault for the next ``count`` matching requests (see ``_faults``)."""
        request = FaultRequest(
            kind=kind,
            path=path,
            method=method,
            count=count,
            status=status,
            seconds=seconds,
            message=message,
        )
        try:
            return self._sandbox.faults.add(request)
        except ValueError as exc:
            raise SandboxControlError(str(exc)) from None

    def faults(self) -> list[Fault]:
        """The faults still active."""
        return self._sandbox.faults.active()

    def clear_faults(self) -> None:
        """Remove every fault."""
        self._sandbox.faults.clear()

    def requests(
        self, *, method: str | None = None, path: str | None = None
    ) -> list[RequestRecord]:
        """The request log, optionally one method and/or one exact relative path."""
        return self._sandbox.log.records(method=method, path=path)

    def refused_requests(self) -> int:
        """How many API requests were refused with 401 (counted, never logged)."""
        return self._sandbox.log.refused

    def orders(self) -> list[dict[str, Any]]:
        """Every order the sandbox holds, as GET /orders/{id} shows it, oldest first."""
        return [order_wire(order) for order in self._sandbox.store.orders.values()]

    def deliveries(self) -> list[DeliveryRecord]:
        """Every webhook delivery attempt so far (scheduled retries included)."""
        return list(self._sandbox.dispatcher.records)

    async def wait_for_deliveries(self) -> None:
        """Wait until every delivery, retries included, has finished."""
        await self._sandbox.dispatcher.drain()

    async def reset(self) -> None:
        """Empty the sandbox: no quotes, orders, webhooks, faults, log or deliveries."""
        await self._sandbox.reset()


def _control(request: web.Request) -> SandboxControl:
    return SandboxControl(request.app[SANDBOX_KEY])


def _decode(data: bytes, kind: type[Any]) -> Any:
    try:
        return msgspec.json.decode(data, type=kind)
    except msgspec.DecodeError as exc:
        raise SandboxControlError(str(exc)) from None


async def _set_status(request: web.Request) -> web.Response:
    body: StatusChangeRequest = _decode(await request.read(), StatusChangeRequest)
    order = _control(request).set_status(int(request.match_info["id"]), body.status, leg=body.leg)
    return json_response({"order": order})


async def _add_fault(request: web.Request) -> web.Response:
    body: FaultRequest = _decode(await request.read(), FaultRequest)
    try:
        fault = request.app[SANDBOX_KEY].faults.add(body)
    except ValueError as exc:
        raise SandboxControlError(str(exc)) from None
    return json_response({"fault": fault}, 201)


async def _list_faults(request: web.Request) -> web.Response:
    return json_response({"faults": _control(request).faults()})


async def _clear_faults(request: web.Request) -> web.Response:
    _control(request).clear_faults()
    return success_response()


async def _requests(request: web.Request) -> web.Response:
    query = request.query
    records = _control(request).requests(method=query.get("method"), path=query.get("path"))
    return json_response({"requests": records})


async def _orders(request: web.Request) -> web.Response:
    return json_response({"orders": _control(request).orders()})


async def _deliveries(request: web.Request) -> web.Response:
    return json_response({"deliveries": _control(request).deliveries()})


async def _reset(request: web.Request) -> web.Response:
    await _control(request).reset()
    return success_response()


async def _document(request: web.Request) -> web.Response:
    document = request.app[SANDBOX_KEY].store.documents.get(request.match_info["id"])
    if document is None:
        return error_response(404, "Document not found")
    return web.Response(body=document.content, content_type=document.content_type)


@cache
def _openapi_document() -> bytes:
    return resources.files(__package__).joinpath("openapi.json").read_bytes()


async def _openapi(_: web.Request) -> web.Response:
    # The API as the spec documents it (package data), for schemathesis and API viewers.
    return web.Response(body=_openapi_document(), content_type="application/json")


@web.middleware
async def control_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """Answer a :class:`SandboxControlError` with the common error body."""
    try:
        response: web.StreamResponse = await handler(request)
    except SandboxControlError as exc:
        return error_response(exc.status, str(exc))
    return response


def routes() -> list[web.RouteDef]:
    """The control routes, under ``/_sandbox``."""
    p = CONTROL_PREFIX
    return [
        web.post(p + "/orders/{id:\\d+}/status", _set_status),
        web.post(f"{p}/faults", _add_fault),
        web.get(f"{p}/faults", _list_faults),
        web.delete(f"{p}/faults", _clear_faults),
        web.get(f"{p}/requests", _requests),
        web.get(f"{p}/orders", _orders),
        web.get(f"{p}/deliveries", _deliveries),
        web.post(f"{p}/reset", _reset),
        web.get(p + "/documents/{id}/{name}", _document),
        web.get(f"{p}/openapi.json", _openapi),
    ]
