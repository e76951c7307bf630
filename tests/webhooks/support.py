"""Shared by the webhook tests: the documented delivery body and the helper types."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

TOKEN = "whk_3f9a2c7e1b"

BodyFactory = Callable[..., bytes]
Serve = Callable[[web.Application], Awaitable[str]]


def event_fields(**overrides: Any) -> dict[str, Any]:
    """A documented delivery body (section 6) as a dict, with ``overrides`` applied."""
    fields: dict[str, Any] = {
        "object_type": "order",
        "object_id": 4201,
        "event_type": "shipment.updated.status",
        "original_value": "order_received",
        "updated_value": "in_transit",
        "updated_at_utc": "2026-01-05T09:00:00.123Z",
        "token": TOKEN,
    }
    fields.update(overrides)
    return fields
