"""Read one delivery body from any framework's chunk stream, bounded in size and time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Mapping

from shipping_async.webhooks._errors import (
    WebhookPayloadError,
    WebhookTimeoutError,
    WebhookTooLargeError,
)

__all__ = ["declared_length", "read_body"]


async def read_body(chunks: AsyncIterable[bytes], *, limit: int, within: float) -> bytes:
    """The body, at most ``limit`` + 1 bytes of it taken, within ``within`` seconds.

    Raises :class:`WebhookTooLargeError` past ``limit``, :class:`WebhookTimeoutError` when
    the sender is too slow, and :class:`WebhookPayloadError` when the stream fails (the
    sender went away: aiohttp raises ``ConnectionResetError``, Starlette its own class).
    """
    data = bytearray()
    try:
        async with asyncio.timeout(within):
            async for chunk in chunks:
                data += chunk[: limit + 1 - len(data)]
                if len(data) > limit:
                    break
    except TimeoutError:
        raise WebhookTimeoutError(within) from None
    except Exception as exc:  # the framework's "client went away", whatever its class
        raise WebhookPayloadError(f"webhook body not received whole: {type(exc).__name__}") from exc
    if len(data) > limit:
        raise WebhookTooLargeError(limit)
    return bytes(data)


def declared_length(headers: Mapping[str, str] | None) -> int:
    """The request's ``Content-Length``, or -1 when absent or not a number."""
    if headers is None:
        return -1
    value = headers.get("Content-Length", headers.get("content-length"))
    try:
        return int(value) if value is not None else -1
    except ValueError:
        return -1
