"""Turn one delivery body into a :class:`WebhookEvent`: size, JSON, shape, then token."""

from __future__ import annotations

import hmac
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated

import msgspec

from shipping_async.models.webhooks import WebhookEvent
from shipping_async.webhooks._errors import (
    WebhookPayloadError,
    WebhookTokenError,
    WebhookTooLargeError,
)

__all__ = ["DEFAULT_MAX_BODY_SIZE", "MIN_FRESHNESS_WINDOW", "parse_event"]

#: Largest body accepted, in bytes. A documented event is seven short fields (about
#: 300 bytes); 64 KiB leaves room for long values and future fields while bounding what
#: an unauthenticated sender can make the receiver hold in memory.
DEFAULT_MAX_BODY_SIZE = 64 * 1024

#: The smallest sensible ``max_age``: the API sends the last retry about 200 s after the
#: first attempt (20 + 40 + 60 + 80 s, section 8), each attempt may wait for its timeout
#: (not shown; 10 s in the sandbox, so 5 x 10 s), and clocks drift: 200 + 50 s plus a
#: minute of skew. A shorter window refuses the API's own retries.
MIN_FRESHNESS_WINDOW = timedelta(minutes=5)


class _EventBody(msgspec.Struct, kw_only=True, frozen=True, gc=False):
    """The delivery body of section 6, decoded strictly.

    Every field is required and typed: no coercion from strings, an aware timestamp.
    Unknown fields are ignored rather than refused: a 400 makes the API retry and then
    mark the webhook ``failing``, so a field added by the API must not stop deliveries.
    The values accept ``null``: the API's first event of an order has no value before it.
    """

    object_type: str
    object_id: int
    event_type: str
    original_value: str | None
    updated_value: str | None
    updated_at_utc: Annotated[datetime, msgspec.Meta(tz=True)]
    token: str


_DECODER = msgspec.json.Decoder(_EventBody)
_AT_PATH = re.compile(r" - at `(?P<path>\$[^`]*)`$")


def parse_event(
    body: bytes,
    token: str,
    *,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    max_age: timedelta | None = None,
    now: datetime | None = None,
) -> WebhookEvent:
    """Decode and authenticate one delivery body.

    ::

        event = parse_event(await request.read(), webhook.token)

    ``updated_at_utc`` comes back as an aware datetime in UTC. The token is compared in
    constant time. Raises :class:`WebhookTooLargeError` (body over ``max_body_size``),
    :class:`WebhookPayloadError` (not JSON, not UTF-8, nested too deep, a missing field,
    a wrong type, a timestamp without a zone or out of range) or :class:`WebhookTokenError`
    (the body's token is not ``token``); nothing else for any input bytes.

    ``max_age`` (off by default) refuses, after the token check, an event whose
    ``updated_at_utc`` is further than that from ``now`` (default: the current time) in
    either direction: a replayed old delivery. It must exceed the API's retry horizon,
    see :data:`MIN_FRESHNESS_WINDOW`.
    """
    if not token:
        raise ValueError("token: the webhook's token is required (an empty one accepts anyone)")
    if len(body) > max_body_size:
        raise WebhookTooLargeError(max_body_size)
    try:
        parsed = _DECODER.decode(body)
    except msgspec.ValidationError as exc:
        text = str(exc)
        match = _AT_PATH.search(text)
        field = match["path"] if match else ""
        reason = text[: match.start()] if match else text
        where = f" at {field}" if field else ""
        raise WebhookPayloadError(
            f"webhook body is not the documented event{where}: {reason}", field=field
        ) from exc
    except msgspec.DecodeError as exc:
        raise WebhookPayloadError(f"webhook body is not valid JSON: {exc}") from exc
    except UnicodeDecodeError as exc:
        # msgspec checks UTF-8 inside strings only when it decodes them, and raises the
        # codec's own error rather than a DecodeError.
        raise WebhookPayloadError(
            f"webhook body is not valid JSON: a string is not UTF-8 ({exc.reason})"
        ) from exc
    except RecursionError as exc:
        # msgspec bounds its nesting by the interpreter's recursion limit and says so with
        # RecursionError; the documented body is one flat object.
        raise WebhookPayloadError(
            "webhook body is not the documented event: nested too deep"
        ) from exc
    # Compare bytes: compare_digest refuses non-ASCII str, and a JSON string may hold any
    # code point (even a lone surrogate, hence surrogatepass).
    if not hmac.compare_digest(
        parsed.token.encode("utf-8", "surrogatepass"), token.encode("utf-8", "surrogatepass")
    ):
        raise WebhookTokenError()
    try:
        updated_at = parsed.updated_at_utc.astimezone(UTC)
    except OverflowError as exc:
        # 9999-12-31T23:59:59-23:59 is a valid datetime whose UTC form is past year 9999.
        raise WebhookPayloadError(
            "webhook body is not the documented event at $.updated_at_utc: out of range",
            field="$.updated_at_utc",
        ) from exc
    if max_age is not None:
        _check_fresh(updated_at, max_age, now or datetime.now(UTC))
    return WebhookEvent(
        object_type=parsed.object_type,
        object_id=parsed.object_id,
        event_type=parsed.event_type,
        original_value=parsed.original_value,
        updated_value=parsed.updated_value,
        updated_at_utc=updated_at,
        token=parsed.token,
    )


def _check_fresh(updated_at: datetime, max_age: timedelta, now: datetime) -> None:
    age = now - updated_at
    if abs(age) > max_age:
        raise WebhookPayloadError(
            f"webhook event is stale at $.updated_at_utc: {age.total_seconds():.0f} s from "
            f"now, more than max_age {max_age.total_seconds():.0f} s (a replay, or a clock "
            "that is off)",
            field="$.updated_at_utc",
        )
