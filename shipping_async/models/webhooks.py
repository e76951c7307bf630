"""Webhook endpoints and the events delivered to them."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

import msgspec

from shipping_async.models._base import Model

__all__ = ["EventType", "Webhook", "WebhookEvent", "WebhookRequest", "WebhookStatus"]


class EventType(StrEnum):
    """The event names of section 6."""

    SHIPMENT_STATUS = "shipment.updated.status"
    SHIPMENT_WAYBILL = "shipment.updated.waybill"


class WebhookStatus(StrEnum):
    ACTIVE = "active"
    FAILING = "failing"


class Webhook(Model):
    """A registered webhook endpoint. ``token`` authenticates its deliveries to you."""

    id: int
    target_url: str = ""
    events: list[str] = msgspec.field(default_factory=list)
    token: str = ""
    status: str = ""

    def __repr__(self) -> str:
        # The token is a secret: keep it out of logs and tracebacks.
        return (
            f"Webhook(id={self.id}, target_url={self.target_url!r}, events={self.events!r}, "
            f"status={self.status!r}, token='***')"
        )


class WebhookEvent(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=False):
    """One event delivery (section 6). ``object_id`` is the order's id."""

    object_type: str
    object_id: int
    event_type: str
    original_value: str | None
    updated_value: str | None
    updated_at_utc: datetime
    token: str

    def __repr__(self) -> str:
        return (
            f"WebhookEvent(object_id={self.object_id}, event_type={self.event_type!r}, "
            f"original_value={self.original_value!r}, updated_value={self.updated_value!r}, "
            f"updated_at_utc={self.updated_at_utc.isoformat()!r}, token='***')"
        )


class _WebhookEnvelope(Model):
    webhook: Webhook


class WebhookRequest(Model):
    """The body of POST /webhooks and PUT/PATCH /webhooks/{id} (sent under ``webhook``).

    ``events`` needs one or more names (section 4.8); an unknown name is left for the
    server to refuse (422), so that new event names need no SDK release.
    """

    target_url: Annotated[str, msgspec.Meta(min_length=1)]
    events: Annotated[list[str], msgspec.Meta(min_length=1)]
