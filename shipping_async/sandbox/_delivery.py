"""Webhook deliveries: POST each event to every subscribed active webhook, with retries.

A non-2xx answer (a redirect included: it is never followed), a connection error or no
answer within ``delivery_timeout`` is a failure. After a failure the delivery is retried
``len(retry_delays)`` times, each retry ``retry_delays[i]`` seconds (sandbox clock) after
the previous failure. When the last retry fails the webhook becomes ``failing`` and no
further delivery goes to it (attempts already waiting for it are skipped). Every attempt
is recorded for the control API.

Deliveries run in tasks owned by the :class:`Dispatcher`; ``close()`` cancels and awaits
them, so no task outlives the app.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import datetime
from typing import Any

import aiohttp
import msgspec

from shipping_async.clock import Clock
from shipping_async.sandbox._config import SandboxConfig
from shipping_async.sandbox._state import Webhook
from shipping_async.sandbox._wire import encode, format_utc_millis

__all__ = ["DeliveryRecord", "Dispatcher"]


class DeliveryRecord(msgspec.Struct, kw_only=True):
    """One delivery attempt. Times are sandbox-clock seconds (``monotonic``).

    ``result``: ``pending``, ``delivered``, ``http_error`` (non-2xx), ``timeout``,
    ``connection_error``, ``skipped`` (the webhook was failing or deleted by then) or
    ``cancelled`` (sandbox reset or shut down).
    """

    id: int
    webhook_id: int
    event_type: str
    object_id: int
    attempt: int
    scheduled_at: float
    sent_at: float | None = None
    finished_at: float | None = None
    sent_at_utc: str | None = None
    status: int | None = None
    result: str = "pending"
    body: dict[str, Any] = msgspec.field(default_factory=dict)


class Dispatcher:
    """Sends webhook events in background tasks and records every attempt."""

    __slots__ = (
        "_clock",
        "_closed",
        "_config",
        "_lookup",
        "_next_id",
        "_session",
        "_tasks",
        "records",
    )

    def __init__(
        self, clock: Clock, config: SandboxConfig, lookup: Callable[[int], Webhook | None]
    ) -> None:
        self._clock = clock
        self._config = config
        self._lookup = lookup
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._next_id = 1
        self._closed = False
        self.records: list[DeliveryRecord] = []

    def emit(
        self,
        webhooks: list[Webhook],
        *,
        order_id: int,
        event_type: str,
        original_value: str,
        updated_value: str,
        at: datetime | None = None,
    ) -> None:
        """Start delivering one event (of moment ``at``, default now) to each active webhook
        subscribed to it."""
        if self._closed:
            return  # the app has shut down: nobody would own the tasks
        updated_at = format_utc_millis(at or self._clock.now())
        for webhook in webhooks:
            if webhook.status != "active" or event_type not in webhook.events:
                continue
            body = {
                "object_type": "order",
                "object_id": order_id,
                "event_type": event_type,
                "original_value": original_value,
                "updated_value": updated_value,
                "updated_at_utc": updated_at,
                "token": webhook.token,
            }
            task = asyncio.get_running_loop().create_task(self._deliver(webhook, body))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait until every delivery (retries included) has finished."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def cancel_all(self) -> None:
        """Cancel every running delivery and wait for the tasks to end."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def reset(self) -> None:
        """Cancel everything and forget the recorded attempts."""
        await self.cancel_all()
        self.records = []
        self._next_id = 1

    async def close(self) -> None:
        """Cancel every delivery and close the HTTP session; later events are dropped."""
        self._closed = True
        await self.cancel_all()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _record(self, webhook: Webhook, body: dict[str, Any], attempt: int) -> DeliveryRecord:
        record = DeliveryRecord(
            id=self._next_id,
            webhook_id=webhook.id,
            event_type=body["event_type"],
            object_id=body["object_id"],
            attempt=attempt,
            scheduled_at=self._clock.monotonic(),
            body=body,
        )
        self._next_id += 1
        self.records.append(record)
        return record

    async def _deliver(self, webhook: Webhook, body: dict[str, Any]) -> None:
        delays = (0.0, *self._config.retry_delays)
        record: DeliveryRecord | None = None
        try:
            for attempt, delay in enumerate(delays, start=1):
                record = self._record(webhook, body, attempt)
                if delay:
                    record.scheduled_at += delay
                    await self._clock.sleep(delay)
                if self._lookup(webhook.id) is not webhook or webhook.status != "active":
                    record.result = "skipped"
                    return
                if await self._attempt(webhook.target_url, body, record):
                    return
            webhook.status = "failing"
        except asyncio.CancelledError:
            if record is not None and record.result == "pending":
                record.result = "cancelled"
            raise

    async def _attempt(self, url: str, body: dict[str, Any], record: DeliveryRecord) -> bool:
        record.sent_at = self._clock.monotonic()
        record.sent_at_utc = format_utc_millis(self._clock.now())
        # The timeout runs on the sandbox clock, so it is raced against the request rather
        # than given to aiohttp (which only knows real seconds).
        post = asyncio.ensure_future(self._post(url, body))
        timer = asyncio.ensure_future(self._clock.sleep(self._config.delivery_timeout))
        try:
            done, _ = await asyncio.wait({post, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (post, timer):
                task.cancel()
            for task in (post, timer):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        record.finished_at = self._clock.monotonic()
        if post not in done or post.cancelled():
            record.result = "timeout"
            return False
        if post.exception() is not None:
            record.result = "connection_error"
            return False
        record.status = post.result()
        ok = 200 <= record.status < 300
        record.result = "delivered" if ok else "http_error"
        return ok

    async def _post(self, url: str, body: dict[str, Any]) -> int:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        # Never follow a redirect: a 3xx is a non-2xx answer, so the attempt failed and is
        # retried (section 6). Following it would count a 302's GET as delivered (the event
        # lost) or re-post a 307's body, webhook token included, to another address.
        async with self._session.post(
            url,
            data=encode(body),
            headers={"Content-Type": "application/json"},
            allow_redirects=False,
        ) as response:
            return response.status
