"""The framework-neutral receiver: bytes and headers in, an answer out, the handler run first."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from aiohttp import web

from shipping_async.clock import Clock, SystemClock
from shipping_async.models.webhooks import WebhookEvent
from shipping_async.webhooks._body import declared_length, read_body
from shipping_async.webhooks._dedupe import DEFAULT_DEDUPE_SIZE, EventDeduplicator, event_key
from shipping_async.webhooks._errors import (
    WebhookError,
    WebhookPayloadError,
    WebhookTimeoutError,
    WebhookTokenError,
    WebhookTooLargeError,
)
from shipping_async.webhooks._parse import DEFAULT_MAX_BODY_SIZE, MIN_FRESHNESS_WINDOW, parse_event

__all__ = [
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_HANDLER_TIMEOUT",
    "DEFAULT_MAX_CONCURRENT_READS",
    "LegCounter",
    "ReceiverStats",
    "WebhookAnswer",
    "WebhookHandler",
    "WebhookReceiver",
]

logger = logging.getLogger("shipping_async.webhooks")

#: The handler the receiver calls once per accepted event (at least once: see the class).
WebhookHandler = Callable[[WebhookEvent], Awaitable[object]]
#: How many distinct events may share this event's body: the legs of its order that may
#: have fired it (see :func:`legs_from`). Called only for a repeated body.
LegCounter = Callable[[WebhookEvent], Awaitable[int]]

DEFAULT_MAX_PENDING = 4096
DEFAULT_MAX_CONCURRENT_HANDLERS = 64
DEFAULT_SHUTDOWN_TIMEOUT = 10.0
#: Seconds to receive a body once its headers are in. A delivery is a few hundred bytes.
DEFAULT_BODY_TIMEOUT = 10.0
#: Seconds a handler may run before the delivery is answered 500 (and so retried). The
#: API's own timeout is not shown (the sandbox's is 10 s): past it the API retries anyway.
DEFAULT_HANDLER_TIMEOUT = 10.0
#: Bodies read at the same time. Each holds at most ``max_body_size`` + 1 bytes, so the
#: receiver's body memory is at most 128 x 64 KiB = 8 MiB however many senders stall.
DEFAULT_MAX_CONCURRENT_READS = 128


@dataclass(frozen=True, slots=True)
class WebhookAnswer:
    """What to answer one delivery: ``status`` and ``text``; ``event`` when one was parsed.

    ``close`` says the body was not read to its end, so the connection must not carry
    another request (the framework would have to discard the rest of the body).
    """

    status: int
    text: str
    event: WebhookEvent | None = None
    close: bool = False


@dataclass(slots=True)
class ReceiverStats:
    """Counts of what the receiver did with the deliveries it got."""

    accepted: int = 0
    duplicates: int = 0
    bad_token: int = 0
    bad_payload: int = 0
    too_large: int = 0
    timed_out: int = 0
    refused_busy: int = 0
    handler_errors: int = 0
    handled: int = 0


# Which counter each refusal adds to: the most specific class first.
_REFUSAL_COUNTER: tuple[tuple[type[WebhookError], str], ...] = (
    (WebhookTokenError, "bad_token"),
    (WebhookTooLargeError, "too_large"),
    (WebhookTimeoutError, "timed_out"),
    (WebhookPayloadError, "bad_payload"),
    (WebhookError, "bad_payload"),
)


class WebhookReceiver:
    """Receives deliveries for one webhook and hands each new event to ``handler``.

    ::

        receiver = WebhookReceiver(on_event, token=webhook.token, legs=legs_from(client))
        answer = await receiver.receive(body, headers)      # any framework
        app.router.add_post("/webhooks", receiver.handle)   # or aiohttp directly

    **At least once.** A delivery is answered only after the handler returned: ``200``
    when it did, ``500`` when it raised or ran past ``handler_timeout``, so the API retries
    it (20, 40, 60 and 80 s later, section 6) and the handler sees it again. The price: the
    API waits for the handler, and a handler that succeeded but whose answer was lost runs
    again on the retry, so a handler must be idempotent (or hand the event to a durable
    queue and return). A handler cancelled by shutdown leaves its delivery unanswered: the
    API retries that too.

    **Duplicates.** An event already handled is answered ``200`` and dropped (the rule is
    in :func:`event_key`); a repeat that arrives while the first is still being handled
    waits for that outcome. The two legs of a hub order send byte-identical events: with
    ``legs`` (see :func:`legs_from`), a repeat is let through as long as fewer deliveries
    of that body were handled than the order has legs holding its value.

    **Recorders.** :meth:`add_recorder` puts a step before the handler (the order ledger's
    evidence, :func:`~shipping_async.ledger.settle_from_webhooks`): each accepted event
    goes through the recorders, then the handler, within ``handler_timeout``; a recorder
    that raises fails the delivery as the handler would (a 500, retried).

    **Bounds.** At most ``max_body_size`` + 1 bytes of a body are read, within
    ``body_timeout`` s, ``max_concurrent_reads`` bodies at a time; handlers run at most
    ``max_concurrent_handlers`` at a time and ``max_pending`` deliveries wait for one.
    Answers: ``200`` handled or duplicate, ``400`` bad body, ``401`` wrong token, ``408``
    body too slow, ``413`` too large, ``500`` handler failed, ``503`` busy or shutting down.
    """

    __slots__ = (
        "_body_timeout",
        "_clock",
        "_closing",
        "_handler",
        "_handler_timeout",
        "_legs",
        "_limit",
        "_max_age",
        "_max_body_size",
        "_max_pending",
        "_max_reads",
        "_reading",
        "_recorders",
        "_running",
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
        body_timeout: float = DEFAULT_BODY_TIMEOUT,
        handler_timeout: float = DEFAULT_HANDLER_TIMEOUT,
        max_concurrent_reads: int = DEFAULT_MAX_CONCURRENT_READS,
        dedupe_size: int = DEFAULT_DEDUPE_SIZE,
        max_pending: int = DEFAULT_MAX_PENDING,
        max_concurrent_handlers: int = DEFAULT_MAX_CONCURRENT_HANDLERS,
        shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
        max_age: timedelta | None = None,
        legs: LegCounter | None = None,
        clock: Clock | None = None,
    ) -> None:
        if not token:
            raise ValueError("token: the webhook's token is required (an empty one accepts anyone)")
        if min(max_body_size, max_pending, max_concurrent_handlers, max_concurrent_reads) < 1:
            raise ValueError(
                "max_body_size, max_pending, max_concurrent_handlers, max_concurrent_reads: "
                "must be >= 1"
            )
        if body_timeout <= 0 or handler_timeout <= 0:
            raise ValueError("body_timeout, handler_timeout: must be > 0 seconds")
        if max_age is not None and max_age < MIN_FRESHNESS_WINDOW:
            raise ValueError(
                f"max_age: {max_age} would refuse the API's own retries (about 200 s after "
                f"the first attempt); use at least {MIN_FRESHNESS_WINDOW}"
            )
        self._handler = handler
        self._recorders: list[WebhookHandler] = []
        self._token = token
        self._max_body_size = max_body_size
        self._body_timeout = body_timeout
        self._handler_timeout = handler_timeout
        self._max_reads = max_concurrent_reads
        self._reading = 0
        self._max_pending = max_pending
        self._limit = asyncio.Semaphore(max_concurrent_handlers)
        self._shutdown_timeout = shutdown_timeout
        self._max_age = max_age
        self._legs = legs
        self._clock: Clock = clock or SystemClock()
        # The task answering each delivery whose handler runs: awaited or cancelled by close().
        self._tasks: set[asyncio.Task[object]] = set()
        # Each event key being handled -> the futures its handlings resolve when they end.
        self._running: dict[bytes, list[asyncio.Future[None]]] = {}
        self._closing = False
        #: The memory of handled events; ``None`` when ``dedupe_size`` is 0.
        self.dedupe = EventDeduplicator(dedupe_size) if dedupe_size > 0 else None
        self.stats = ReceiverStats()

    def add_recorder(self, recorder: WebhookHandler) -> None:
        """Run ``recorder(event)`` before the handler for every accepted event, from now on.

        ``recorder`` must be idempotent: a delivery whose handler fails is retried whole.
        """
        self._recorders.append(recorder)

    def remove_recorder(self, recorder: WebhookHandler) -> None:
        """Stop running ``recorder`` (a no-op if it is not there)."""
        if recorder in self._recorders:
            self._recorders.remove(recorder)

    @property
    def pending(self) -> int:
        """Deliveries whose handler is running or waiting for its turn."""
        return len(self._tasks)

    async def receive(
        self,
        body: bytes | AsyncIterable[bytes],
        headers: Mapping[str, str] | None = None,
        *,
        remote: str | None = None,
    ) -> WebhookAnswer:
        """Take one delivery, whatever the web framework: the raw body (bytes, or the
        framework's chunk stream, read here within the bounds) and the request headers.

        ::

            answer = await receiver.receive(request.stream(), request.headers)  # Starlette
            return Response(answer.text, status_code=answer.status)

        Never raises for anything a sender can send; the handler's own errors become a 500.
        """
        if self._closing:
            return self._refuse_busy(close=not isinstance(body, bytes))
        try:
            data = await self._read(body, headers)
            event = parse_event(
                data,
                self._token,
                max_body_size=self._max_body_size,
                max_age=self._max_age,
                now=self._clock.now(),
            )
        except WebhookError as exc:
            return self._refuse(exc, remote)
        if self._closing or len(self._tasks) >= self._max_pending:
            return self._refuse_busy(close=False)
        return await self._deliver(event)

    async def handle(self, request: web.Request) -> web.Response:
        """The aiohttp handler for ``POST <path>``: one delivery, one answer."""
        answer = await self.receive(
            request.content.iter_any(), request.headers, remote=request.remote
        )
        response = web.Response(status=answer.status, text=answer.text)
        if answer.close:
            # The rest of the body was never read: do not reuse this connection for the
            # next request (aiohttp discards what is left instead of parsing it).
            response.force_close()
        return response

    async def _read(
        self, body: bytes | AsyncIterable[bytes], headers: Mapping[str, str] | None
    ) -> bytes:
        if declared_length(headers) > self._max_body_size:
            raise WebhookTooLargeError(self._max_body_size)
        if isinstance(body, bytes):
            return body
        if self._reading >= self._max_reads:
            raise _Busy
        self._reading += 1
        try:
            return await read_body(body, limit=self._max_body_size, within=self._body_timeout)
        finally:
            self._reading -= 1

    async def _deliver(self, event: WebhookEvent) -> WebhookAnswer:
        if self.dedupe is None:
            return await self._run(event, b"")
        key = event_key(event)
        allowance = 1
        counted = self._legs is None
        while True:
            if self._closing:
                return self._refuse_busy(close=False)
            # No await between this check and _run's registration: two concurrent
            # deliveries of one event cannot both pass the same count.
            if self.dedupe.check_and_add(event, allowance=allowance):
                return await self._run(event, key)
            running = self._running.get(key)
            if not counted and self._legs is not None:
                counted = True
                try:
                    allowance = max(1, await self._legs(event))
                except Exception as exc:  # any failure to read the order: let the API retry
                    logger.warning(
                        "could not count the legs of order %d for a repeated event (%s); "
                        "answered 503 so that the API retries",
                        event.object_id,
                        exc,
                    )
                    return self._refuse_busy(close=False)
                if allowance > 1:
                    continue  # the count may have moved during the lookup: check again
            if running:
                # Its first handling is still running: its outcome decides (a failure
                # takes the acceptance back, and this delivery is handled instead).
                await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                continue
            self.stats.duplicates += 1
            logger.debug("dropped a duplicate delivery of %r", event)
            return WebhookAnswer(200, "duplicate", event)

    async def _run(self, event: WebhookEvent, key: bytes) -> WebhookAnswer:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._running.setdefault(key, []).append(done)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.stats.accepted += 1
        try:
            async with self._limit, asyncio.timeout(self._handler_timeout):
                for recorder in tuple(self._recorders):
                    await recorder(event)
                await self._handler(event)
        except Exception as exc:
            if self.dedupe is not None:
                self.dedupe.discard(event)  # not handled: its retry must get through
            self.stats.handler_errors += 1
            reason = "ran past its timeout" if isinstance(exc, TimeoutError) else "failed"
            logger.error(
                "webhook handler %s on %r; answered 500 so that the API retries",
                reason,
                event,
                exc_info=not isinstance(exc, TimeoutError),
            )
            return WebhookAnswer(500, f"handler {reason}, retry later", event)
        except asyncio.CancelledError:
            if self.dedupe is not None:
                self.dedupe.discard(event)
            logger.warning("handler of %r cancelled: the API will retry the delivery", event)
            raise
        finally:
            self._tasks.discard(task)
            waiters = self._running[key]
            waiters.remove(done)
            if not waiters:
                del self._running[key]
            done.set_result(None)
        self.stats.handled += 1
        return WebhookAnswer(200, "handled", event)

    def _refuse_busy(self, *, close: bool) -> WebhookAnswer:
        # Not remembered as seen: the API's retry (about 20 s later) must get through.
        self.stats.refused_busy += 1
        return WebhookAnswer(503, "receiver busy, retry later", close=close)

    def _refuse(self, exc: WebhookError, remote: str | None) -> WebhookAnswer:
        if isinstance(exc, _Busy):
            return self._refuse_busy(close=True)
        counter = next(name for kind, name in _REFUSAL_COUNTER if isinstance(exc, kind))
        setattr(self.stats, counter, getattr(self.stats, counter) + 1)
        # One line per refused delivery, no traceback: the text is ours (it never quotes
        # the body), and %r keeps the sender's address on one line whatever it holds.
        logger.warning("refused a webhook delivery from %r: %s", remote, exc)
        close = isinstance(exc, WebhookTooLargeError | WebhookTimeoutError)
        return WebhookAnswer(exc.http_status, str(exc), close=close)

    async def join(self) -> None:
        """Wait until every delivery being handled has been answered."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def close(self, grace: float | None = None) -> None:
        """Stop accepting (``503``), give running handlers ``grace`` s, cancel the rest.

        ``grace`` defaults to ``shutdown_timeout``. A cancelled handler's delivery is left
        unanswered, so the API retries it. Calling ``close`` again is harmless.
        """
        self._closing = True
        if not self._tasks:
            return
        if grace is None:
            grace = self._shutdown_timeout
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self.join()
        left = set(self._tasks)
        for task in left:
            task.cancel()
        await asyncio.gather(*left, return_exceptions=True)

    async def on_shutdown(self, app: web.Application) -> None:
        """An ``app.on_shutdown`` callback: :meth:`close` with the default grace period."""
        await self.close()

    def __repr__(self) -> str:
        return f"WebhookReceiver(pending={len(self._tasks)}, stats={self.stats!r}, token='***')"


class _Busy(WebhookError):
    """Every body-reading slot is taken: answered 503 without reading."""

    http_status = 503
