"""The errors of webhook delivery: a refused token, a bad body, an oversized body.

::

    ShippingError
    └── WebhookError                     a delivery could not be accepted
        ├── WebhookTokenError                 401: the body's token is not the webhook's
        ├── WebhookPayloadError               400: not JSON, or not the documented body
        ├── WebhookTimeoutError               408: the body did not arrive in time
        └── WebhookTooLargeError              413: the body is over the size limit

Each class carries the HTTP status the receiver answers with, so the receiver maps an
error to a status without an if-ladder. No text ever contains a token.
"""

from __future__ import annotations

from typing import ClassVar

from shipping_async.errors import ShippingError

__all__ = [
    "WebhookError",
    "WebhookPayloadError",
    "WebhookTimeoutError",
    "WebhookTokenError",
    "WebhookTooLargeError",
]


class WebhookError(ShippingError):
    """A webhook delivery could not be accepted; ``http_status`` is the receiver's answer."""

    http_status: ClassVar[int] = 400


class WebhookTokenError(WebhookError):
    """The delivery's ``token`` is not the webhook's token: the sender is not the API."""

    http_status = 401

    def __init__(self) -> None:
        super().__init__(
            "webhook token mismatch: the delivery's token is not the one this receiver was "
            "given (check the token returned when the webhook was registered)"
        )


class WebhookPayloadError(WebhookError, ValueError):
    """The body is not JSON, or not the documented event body.

    ``field`` is the path of the offending value (``$.object_id``) when the body is JSON of
    the wrong shape, and empty when the body is not JSON at all.
    """

    http_status = 400

    def __init__(self, message: str, *, field: str = "") -> None:
        self.field = field
        super().__init__(message)


class WebhookTooLargeError(WebhookError):
    """The body is larger than the receiver accepts (``limit`` bytes)."""

    http_status = 413

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(
            f"webhook body too large: over {limit} bytes (raise max_body_size if real events "
            "are this big)"
        )


class WebhookTimeoutError(WebhookError):
    """The body did not arrive within ``timeout`` seconds of its headers (a stalled sender)."""

    http_status = 408

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        super().__init__(
            f"webhook body not received within {timeout:g} s (a stalled or very slow sender)"
        )
