"""Webhook endpoints: register, read, replace (PUT and PATCH alike) and delete."""

from __future__ import annotations

import ipaddress
import re

import msgspec
from aiohttp import web
from yarl import URL

from shipping_async.sandbox._core import SANDBOX_KEY, Sandbox
from shipping_async.sandbox._schemas import WebhookBody, WebhookRequest
from shipping_async.sandbox._state import Webhook
from shipping_async.sandbox._wire import (
    error_list_response,
    error_response,
    json_response,
    success_response,
    webhook_wire,
)

__all__ = ["EVENTS", "routes", "validate_webhook"]

#: The event names of spec 6.
EVENTS = ("shipment.updated.status", "shipment.updated.waybill")
_decoder = msgspec.json.Decoder(WebhookRequest)
#: One DNS label (RFC 1123, underscores tolerated as resolvers do): no space, no brackets.
_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")


def _valid_host(host: str | None) -> bool:
    """An IP address or a DNS name of valid labels (``host`` in its IDNA, ASCII form)."""
    if not host:
        return False
    try:
        ipaddress.ip_address(host)
    except ValueError:
        name = host.removesuffix(".")
        return len(name) <= 253 and all(_LABEL.fullmatch(label) for label in name.split("."))
    return True


def validate_webhook(body: WebhookBody) -> list[str]:
    """The 422 texts for a registration or an update; empty when it is valid."""
    errors: list[str] = []
    try:
        url = URL(body.target_url)
        # yarl keeps whatever stands between "//" and the path as the host, spaces and
        # angle brackets included: check it is a host a delivery could be sent to.
        valid_url = (
            url.scheme in ("http", "https") and url.is_absolute() and _valid_host(url.raw_host)
        )
    except ValueError:
        valid_url = False
    if not valid_url:
        errors.append("Target url is invalid")
    unknown = [name for name in body.events if name not in EVENTS]
    if unknown:
        errors.append("Events not permitted: " + ", ".join(unknown))
    elif not body.events:
        errors.append("Events can't be blank")
    return errors


async def _read(request: web.Request) -> WebhookBody | web.Response:
    # A body that is not the documented shape is a 422 too: the only error code the spec
    # gives these endpoints besides 401/404.
    if request.content_type != "application/json":
        return error_list_response(422, ["Content-Type must be application/json"])
    try:
        body = _decoder.decode(await request.read()).webhook
    except msgspec.DecodeError as exc:
        return error_list_response(422, [str(exc)])
    errors = validate_webhook(body)
    if errors:
        return error_list_response(422, errors)
    return body


def _events(body: WebhookBody) -> list[str]:
    return list(dict.fromkeys(body.events))  # without duplicates, in the order sent


async def create_webhook(request: web.Request) -> web.Response:
    """POST /webhooks: 201 ``{"webhook": Webhook}`` with a fresh token, status active."""
    sandbox = request.app[SANDBOX_KEY]
    body = await _read(request)
    if isinstance(body, web.Response):
        return body
    store = sandbox.store
    webhook = Webhook(
        id=store.next_id("webhook"),
        target_url=body.target_url,
        events=_events(body),
        token=store.token(),
    )
    store.webhooks[webhook.id] = webhook
    return json_response({"webhook": webhook_wire(webhook)}, 201)


def _lookup(sandbox: Sandbox, request: web.Request) -> Webhook | web.Response:
    webhook_id = int(request.match_info["id"])
    webhook = sandbox.store.webhooks.get(webhook_id)
    if webhook is None:
        return error_response(404, f"Webhook endpoint with id {webhook_id} not found")
    return webhook


async def get_webhook(request: web.Request) -> web.Response:
    """GET /webhooks/{id}."""
    webhook = _lookup(request.app[SANDBOX_KEY], request)
    if isinstance(webhook, web.Response):
        return webhook
    return json_response({"webhook": webhook_wire(webhook)})


async def update_webhook(request: web.Request) -> web.Response:
    """PUT or PATCH /webhooks/{id}: both fields replaced; token and status unchanged."""
    webhook = _lookup(request.app[SANDBOX_KEY], request)
    if isinstance(webhook, web.Response):
        return webhook
    body = await _read(request)
    if isinstance(body, web.Response):
        return body
    webhook.target_url = body.target_url
    webhook.events = _events(body)
    return json_response({"webhook": webhook_wire(webhook)})


async def delete_webhook(request: web.Request) -> web.Response:
    """DELETE /webhooks/{id}: 200 success body; pending deliveries to it are skipped."""
    sandbox = request.app[SANDBOX_KEY]
    webhook = _lookup(sandbox, request)
    if isinstance(webhook, web.Response):
        return webhook
    del sandbox.store.webhooks[webhook.id]
    return success_response()


def routes(prefix: str) -> list[web.RouteDef]:
    """The webhook routes under ``prefix``."""
    item = prefix + "/webhooks/{id:\\d+}"
    return [
        web.post(f"{prefix}/webhooks", create_webhook),
        web.get(item, get_webhook),
        web.put(item, update_webhook),
        web.patch(item, update_webhook),
        web.delete(item, delete_webhook),
    ]
