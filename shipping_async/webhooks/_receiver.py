"""The aiohttp receiver: answer a delivery at once, run the handler in an owned task."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from shipping_async.models.webhooks import WebhookEvent
from shipping_async.webhooks._dedupe import DEFAULT_DEDUPE_SIZE, EventDeduplicator
from shipping_async.webhooks._errors import (
    WebhookError,
    WebhookTokenError,
    WebhookTooLargeError,
)
from shipping_async.webhooks._parse import DEFAULT_MAX_BODY_SIZE, parse_event

__all__ = [
    "WEBHOOK_RECEIVER",
    "ReceiverStats",
    "WebhookHandler",
    "WebhookReceiver",
    "add_webhook_route",
    "create_webhook_app",
]

logger = logging.getLogger("shipping_async.webhooks")

#: The handler the receiver calls once per accepted event.
WebhookHandler = Callable[[WebhookEvent], Awaitable[object]]

DEFAULT_MAX_PENDING = 4096
DEFAULT_MAX_CONCURRENT_HANDLERS = 64
DEFAULT_SHUTDOWN_TIMEOUT = 10.0
# After a 413 aiohttp keeps reading and discarding the unread body ("lingering") so that
# the sender sees the answer rather than a reset; its default of 10 s is meant for
# uploads. An event is a few hundred bytes, so a receiver app lingers 1 s at most.
_LINGERING_TIME = 1.0


@dataclass(slots=True)
class ReceiverStats:
    """Counts of what the receiver did with the deliveries it got."""

    accepted: int = 0
    duplicates: int = 0
    bad_token: int = 0
    bad_payload: int = 0
    too_large: int = 0
    refused_busy: int = 0
    handler_errors: int = 0
    handled: int = 0


class WebhookReceiver:
    """Receives deliveries for one webhook and hands each new event to ``handler``.

    ::

        receiver = WebhookReceiver(on_event, token=webhook.token)
        app.router.add_post("/webhooks", receiver.handle)
        app.on_shutdown.append(receiver.on_shutdown)

    (:func:`add_webhook_route` does those three lines.) For every delivery it reads at
    most ``max_body_size + 1`` bytes, checks the body and the token, drops an event it
    already accepted, answers ``202`` and only then runs the handler, in a task it owns:
    the API's timeout is short and undocumented, so the answer never waits for the
    handler. Answers: ``202`` accepted, ``200`` duplicate (dropped), ``400`` bad body,
    ``401`` wrong token, ``413`` too large, ``503`` busy or shutting down (the API
    retries those, about 20 s later).

    A handler exception is logged with the event and counted; the delivery was already
    answered ``2xx``, so it is never re-sent. Handlers run at most
    ``max_concurrent_handlers`` at a time; when ``max_pending`` events are waiting, new
    deliveries get ``503`` instead of growing memory without bound.
    """

    __slots__ = (
        "_closing",
        "_handler",
        "_limit",
        "_max_body_size",
        "_max_pending",
        "_shutdown_timeout",
        "_tasks",
        "_token",
        "dedupe",
        "stats",
    )

    def __init__(
        self,
        handler: WebhookHandler,
        *,
        token: str,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        dedupe_size: int = DEFAULT_DEDUPE_SIZE,
        max_pending: int = DEFAULT_MAX_PENDING,
        max_concurrent_handlers: int = DEFAULT_MAX_CONCURRENT_HANDLERS,
        shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
    ) -> None:
        if not token:
            raise ValueError("token: the webhook's token is required (an empty one accepts anyone)")
        if max_body_size < 1 or max_pending < 1 or max_concurrent_handlers < 1:
            raise ValueError("max_body_size, max_pending, max_concurrent_handlers: must be >= 1")
        self._handler = handler
        self._token = token
        self._max_body_size = max_body_size
        self._max_pending = max_pending
        self._limit = asyncio.Semaphore(max_concurrent_handlers)
        self._shutdown_timeout = shutdown_timeout
        # Each running handler task and its event: owned here, awaited or cancelled by close().
        self._tasks: dict[asyncio.Task[None], WebhookEvent] = {}
        self._closing = False
        #: The memory of accepted events; ``None`` when ``dedupe_size`` is 0.
        self.dedupe = EventDeduplicator(dedupe_size) if dedupe_size > 0 else None
        self.stats = ReceiverStats()

    @property
    def pending(self) -> int:
        """Accepted events whose handler has not finished yet."""
        return len(self._tasks)

    async def handle(self, request: web.Request) -> web.Response:
        """The aiohttp handler for ``POST <path>``: one delivery, one answer."""
        if self._busy():
            return self._refuse_busy()
        try:
            body = await _read_body(request, self._max_body_size)
            event = parse_event(body, self._token, max_body_size=self._max_body_size)
        except WebhookError as exc:
            return self._refuse(request, exc)
        # Checked again after the read: other deliveries (or close()) may have come in
        # meanwhile. From here to create_task there is no await, so the bound is exact
        # and close() sees every task.
        if self._busy():
            return self._refuse_busy()
        if self.dedupe is not None and not self.dedupe.check_and_add(event):
            self.stats.duplicates += 1
            logger.debug("dropped a duplicate delivery of %r", event)
            return web.Response(status=200)
        self.stats.accepted += 1
        task = asyncio.get_running_loop().create_task(self._run(event))
        self._tasks[task] = event
        task.add_done_callback(self._forget)
        return web.Response(status=202)

    def _busy(self) -> bool:
        return self._closing or len(self._tasks) >= self._max_pending

    def _refuse_busy(self) -> web.Response:
        # Not remembered as seen: the API's retry (about 20 s later) must get through.
        self.stats.refused_busy += 1
        return web.Response(status=503, text="receiver busy, retry later")

    def _refuse(self, request: web.Request, exc: WebhookError) -> web.Response:
        if isinstance(exc, WebhookTokenError):
            self.stats.bad_token += 1
        elif isinstance(exc, WebhookTooLargeError):
            self.stats.too_large += 1
        else:
            self.stats.bad_payload += 1
        logger.warning("refused a webhook delivery from %s: %s", request.remote, exc)
        response = web.Response(status=exc.http_status, text=str(exc))
        if isinstance(exc, WebhookTooLargeError):
            # The rest of the body was never read: do not reuse this connection for the
            # next request (aiohttp discards what is left instead of parsing it).
            response.force_close()
        return response

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)

    async def _run(self, event: WebhookEvent) -> None:
        async with self._limit:
            try:
                await self._handler(event)
            except Exception:
                # The API got its 2xx already and will not re-send: this log line is the
                # only trace of the failure, so it carries the event (token masked).
                self.stats.handler_errors += 1
                logger.exception("webhook handler failed on %r", event)
            else:
                self.stats.handled += 1

    async def join(self) -> None:
        """Wait until every accepted event has been handled (events arriving meanwhile too)."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def close(self, grace: float | None = None) -> None:
        """Stop accepting (``503``), give running handlers ``grace`` s, cancel the rest.

        ``grace`` defaults to ``shutdown_timeout``. Events cancelled here were answered
        ``2xx`` and are lost; each is logged. Calling ``close`` again is harmless.
        """
        self._closing = True
        if not self._tasks:
            return
        if grace is None:
            grace = self._shutdown_timeout
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self.join()
        left = dict(self._tasks)
        for task, event in left.items():
            task.cancel()
            logger.error("cancelled the handler of %r after %g s of shutdown", event, grace)
        await asyncio.gather(*left, return_exceptions=True)

    async def on_shutdown(self, app: web.Application) -> None:
        """An ``app.on_shutdown`` callback: :meth:`close` with the default grace period."""
        await self.close()

    def __repr__(self) -> str:
        return f"WebhookReceiver(pending={len(self._tasks)}, stats={self.stats!r}, token='***')"


async def _read_body(request: web.Request, limit: int) -> bytes:
    """The body, reading at most ``limit + 1`` bytes whatever the sender sends."""
    if request.content_length is not None and request.content_length > limit:
        raise WebhookTooLargeError(limit)
    body = bytearray()
    while len(body) <= limit:
        chunk = await request.content.read(limit + 1 - len(body))
        if not chunk:
            break
        body += chunk
    if len(body) > limit:
        raise WebhookTooLargeError(limit)
    return bytes(body)


#: Where :func:`create_webhook_app` keeps its receiver: ``app[WEBHOOK_RECEIVER].stats``.
WEBHOOK_RECEIVER = web.AppKey("shipping_async.webhook_receiver", WebhookReceiver)


def add_webhook_route(
    app: web.Application,
    handler: WebhookHandler,
    *,
    token: str,
    path: str = "/webhooks",
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    dedupe_size: int = DEFAULT_DEDUPE_SIZE,
    max_pending: int = DEFAULT_MAX_PENDING,
    max_concurrent_handlers: int = DEFAULT_MAX_CONCURRENT_HANDLERS,
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
) -> WebhookReceiver:
    """Add ``POST path`` to an existing app; its handler tasks end with the app's shutdown.

    ::

        receiver = add_webhook_route(app, on_event, token=webhook.token, path="/hooks/shipping")
    """
    receiver = WebhookReceiver(
        handler,
        token=token,
        max_body_size=max_body_size,
        dedupe_size=dedupe_size,
        max_pending=max_pending,
        max_concurrent_handlers=max_concurrent_handlers,
        shutdown_timeout=shutdown_timeout,
    )
    app.router.add_post(path, receiver.handle)
    app.on_shutdown.append(receiver.on_shutdown)
    return receiver


def create_webhook_app(
    handler: WebhookHandler,
    *,
    token: str,
    path: str = "/webhooks",
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    dedupe_size: int = DEFAULT_DEDUPE_SIZE,
    max_pending: int = DEFAULT_MAX_PENDING,
    max_concurrent_handlers: int = DEFAULT_MAX_CONCURRENT_HANDLERS,
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
) -> web.Application:
    """An aiohttp application that receives one webhook's deliveries on ``POST path``.

    ::

        async def on_event(event: WebhookEvent) -> None:
            print(event.object_id, event.event_type, event.updated_value)

        web.run_app(create_webhook_app(on_event, token=webhook.token), port=8080)

    The receiver is ``app[WEBHOOK_RECEIVER]`` (its ``stats``, ``pending``, ``join()``).
    """
    app = web.Application(handler_args={"lingering_time": _LINGERING_TIME})
    app[WEBHOOK_RECEIVER] = add_webhook_route(
        app,
        handler,
        token=token,
        path=path,
        max_body_size=max_body_size,
        dedupe_size=dedupe_size,
        max_pending=max_pending,
        max_concurrent_handlers=max_concurrent_handlers,
        shutdown_timeout=shutdown_timeout,
    )
    return app
