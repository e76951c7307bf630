"""Tests of the aiohttp receiver on a real loopback server: answers, tasks, duplicates."""

from __future__ import annotations

import asyncio
import gc
import logging
import tracemalloc
from collections.abc import AsyncIterator
from unittest import mock

import aiohttp
import msgspec
import pytest
from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.test_utils import make_mocked_request

from shipping_async.models.webhooks import WebhookEvent
from shipping_async.webhooks import (
    DEDUPE_BYTES_PER_EVENT,
    WEBHOOK_RECEIVER,
    WebhookReceiver,
    WebhookTooLargeError,
    add_webhook_route,
    create_webhook_app,
)
from shipping_async.webhooks._receiver import _read_body

from .support import TOKEN, BodyFactory, Serve, event_fields


class Recorder:
    """A handler that records events; ``gate`` (when set) holds each call until opened."""

    def __init__(self, *, gated: bool = False) -> None:
        self.events: list[WebhookEvent] = []
        self.gate = asyncio.Event()
        if not gated:
            self.gate.set()
        self.running = 0
        self.most_running = 0

    async def __call__(self, event: WebhookEvent) -> None:
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await self.gate.wait()
            self.events.append(event)
        finally:
            self.running -= 1


async def started(
    serve: Serve, handler: Recorder, **options: object
) -> tuple[str, WebhookReceiver]:
    app = create_webhook_app(handler, token=TOKEN, **options)  # type: ignore[arg-type]
    base = await serve(app)
    return base + "/webhooks", app[WEBHOOK_RECEIVER]


async def test_accepted_event_is_answered_202_and_handed_to_the_handler(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    recorder = Recorder()
    url, receiver = await started(serve, recorder)

    async with http.post(url, data=make_body()) as response:
        assert response.status == 202
    await receiver.join()

    assert [e.object_id for e in recorder.events] == [4201]
    assert receiver.stats.accepted == receiver.stats.handled == 1


async def test_answer_does_not_wait_for_the_handler(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    recorder = Recorder(gated=True)
    url, receiver = await started(serve, recorder)

    async with asyncio.timeout(5):
        async with http.post(url, data=make_body()) as response:
            assert response.status == 202
    assert receiver.pending == 1
    assert recorder.events == []

    recorder.gate.set()
    await receiver.join()
    assert len(recorder.events) == 1


async def test_wrong_token_is_answered_401_and_never_handled(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    recorder = Recorder()
    url, receiver = await started(serve, recorder)

    async with http.post(url, data=make_body(token="whk_forged")) as response:
        assert response.status == 401
        assert TOKEN not in await response.text()
    await receiver.join()

    assert recorder.events == []
    assert receiver.stats.bad_token == 1
    assert receiver.stats.accepted == 0


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"object_type": "order", "object_id": 42', id="truncated-json"),
        pytest.param(b'{"object_type": "order", "object_id": "42"}', id="wrong-type"),
        pytest.param(b"", id="empty"),
    ],
)
async def test_bad_body_is_answered_400_and_never_handled(
    serve: Serve, http: aiohttp.ClientSession, body: bytes
) -> None:
    recorder = Recorder()
    url, receiver = await started(serve, recorder)

    async with http.post(url, data=body) as response:
        assert response.status == 400
    assert recorder.events == []
    assert receiver.stats.bad_payload == 1


async def test_wrong_types_in_a_full_body_are_answered_400(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    url, _ = await started(serve, Recorder())

    async with http.post(url, data=make_body(updated_at_utc=1767603600)) as response:
        assert response.status == 400
        assert "updated_at_utc" in await response.text()


async def test_ten_megabyte_body_is_answered_413_and_the_server_keeps_working(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    recorder = Recorder()
    url, receiver = await started(serve, recorder)

    async with http.post(url, data=b"x" * 10_000_000) as response:
        assert response.status == 413
    async with http.post(url, data=make_body()) as response:
        assert response.status == 202
    await receiver.join()

    assert receiver.stats.too_large == 1
    assert len(recorder.events) == 1


async def test_chunked_body_without_a_length_is_cut_off_at_the_limit(
    serve: Serve, http: aiohttp.ClientSession
) -> None:
    url, receiver = await started(serve, Recorder(), max_body_size=1024)

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(20):
            yield b"y" * 10_000

    async with http.post(url, data=chunks()) as response:
        assert response.status == 413
    assert receiver.stats.too_large == 1


async def test_body_reader_takes_at_most_one_byte_over_the_limit() -> None:
    payload = StreamReader(mock.Mock(_reading_paused=False), 2**16)
    payload.feed_data(b"z" * 10_000_000)
    payload.feed_eof()
    request = make_mocked_request("POST", "/webhooks", payload=payload)

    with pytest.raises(WebhookTooLargeError):
        await _read_body(request, 65_536)

    assert len(await payload.read()) == 10_000_000 - 65_537


async def test_declared_length_over_the_limit_is_refused_before_reading() -> None:
    payload = StreamReader(mock.Mock(_reading_paused=False), 2**16)
    payload.feed_data(b"z" * 2_000)
    payload.feed_eof()
    request = make_mocked_request(
        "POST", "/webhooks", headers={"Content-Length": "2000"}, payload=payload
    )

    with pytest.raises(WebhookTooLargeError):
        await _read_body(request, 1_000)

    assert len(await payload.read()) == 2_000


async def test_duplicate_delivery_is_answered_2xx_and_handled_once(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    recorder = Recorder()
    url, receiver = await started(serve, recorder)

    statuses = []
    for _ in range(3):
        async with http.post(url, data=make_body()) as response:
            statuses.append(response.status)
    await receiver.join()

    assert statuses == [202, 200, 200]
    assert len(recorder.events) == 1
    assert receiver.stats.duplicates == 2


async def test_concurrent_duplicates_are_accepted_once(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    recorder = Recorder()
    url, receiver = await started(serve, recorder)

    async def post() -> int:
        async with http.post(url, data=make_body()) as response:
            return response.status

    statuses = await asyncio.gather(*(post() for _ in range(20)))
    await receiver.join()

    assert sorted(statuses) == [200] * 19 + [202]
    assert len(recorder.events) == 1


async def test_duplicate_memory_is_bounded_by_dedupe_size(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    recorder = Recorder()
    url, receiver = await started(serve, recorder, dedupe_size=2)

    for order_id in (1, 2, 3, 1):
        async with http.post(url, data=make_body(object_id=order_id)) as response:
            assert response.status == 202
    await receiver.join()

    assert receiver.dedupe is not None
    assert len(receiver.dedupe) == 2
    assert [e.object_id for e in recorder.events] == [1, 2, 3, 1]


async def test_handler_exception_is_logged_with_the_event_and_the_answer_stays_2xx(
    serve: Serve,
    http: aiohttp.ClientSession,
    make_body: BodyFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    handled: list[int] = []

    async def fragile(event: WebhookEvent) -> None:
        if event.object_id == 13:
            raise RuntimeError("database is down")
        handled.append(event.object_id)

    app = create_webhook_app(fragile, token=TOKEN)
    url = await serve(app) + "/webhooks"
    receiver = app[WEBHOOK_RECEIVER]

    with caplog.at_level(logging.ERROR, logger="shipping_async.webhooks"):
        async with http.post(url, data=make_body(object_id=13)) as response:
            assert response.status == 202
        async with http.post(url, data=make_body(object_id=14)) as response:
            assert response.status == 202
        await receiver.join()

    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "object_id=13" in record.getMessage()
    assert record.exc_info is not None
    assert "database is down" in caplog.text
    assert TOKEN not in caplog.text
    assert receiver.stats.handler_errors == 1
    assert handled == [14]


async def test_handlers_run_at_most_max_concurrent_handlers_at_a_time(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    recorder = Recorder(gated=True)
    url, receiver = await started(serve, recorder, max_concurrent_handlers=2)

    for order_id in range(5):
        async with http.post(url, data=make_body(object_id=order_id)) as response:
            assert response.status == 202
    await asyncio.sleep(0.05)  # let every task reach the semaphore or the gate
    assert recorder.running == 2
    recorder.gate.set()
    await receiver.join()

    assert recorder.most_running == 2
    assert len(recorder.events) == 5


async def test_full_queue_answers_503_and_does_not_remember_the_refused_event(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    recorder = Recorder(gated=True)
    url, receiver = await started(serve, recorder, max_pending=1)

    async with http.post(url, data=make_body(object_id=1)) as response:
        assert response.status == 202
    async with http.post(url, data=make_body(object_id=2)) as response:
        assert response.status == 503
    recorder.gate.set()
    await receiver.join()
    async with http.post(url, data=make_body(object_id=2)) as response:
        assert response.status == 202  # the API's retry gets through
    await receiver.join()

    assert [e.object_id for e in recorder.events] == [1, 2]
    assert receiver.stats.refused_busy == 1


async def test_shutdown_waits_for_running_handlers(make_body: BodyFactory) -> None:
    recorder = Recorder(gated=True)
    app = create_webhook_app(recorder, token=TOKEN)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://{host}:{port}/webhooks", data=make_body()) as response,
    ):
        assert response.status == 202

    asyncio.get_running_loop().call_later(0.05, recorder.gate.set)
    await runner.cleanup()

    assert len(recorder.events) == 1
    assert app[WEBHOOK_RECEIVER].pending == 0


async def test_close_cancels_handlers_still_running_after_the_grace_and_logs_them(
    make_body: BodyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder(gated=True)
    receiver = WebhookReceiver(recorder, token=TOKEN, shutdown_timeout=0.05)
    app = web.Application()
    app.router.add_post("/webhooks", receiver.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    url = f"http://{host}:{port}/webhooks"
    async with aiohttp.ClientSession() as http:
        async with http.post(url, data=make_body(object_id=77)) as response:
            assert response.status == 202

        with caplog.at_level(logging.ERROR, logger="shipping_async.webhooks"):
            await receiver.close()
        async with http.post(url, data=make_body(object_id=78)) as response:
            assert response.status == 503  # closed: the API retries later
    await runner.cleanup()

    assert receiver.pending == 0
    assert recorder.events == []
    assert "object_id=77" in caplog.text


async def test_delivery_still_being_read_when_close_starts_is_refused_503(
    make_body: BodyFactory,
) -> None:
    recorder = Recorder()
    receiver = WebhookReceiver(recorder, token=TOKEN)
    payload = StreamReader(mock.Mock(_reading_paused=False), 2**16)
    request = make_mocked_request("POST", "/webhooks", payload=payload)
    answer = asyncio.create_task(receiver.handle(request))
    await asyncio.sleep(0)  # the handler now waits for the body

    await receiver.close()
    payload.feed_data(make_body())
    payload.feed_eof()

    assert (await answer).status == 503
    assert receiver.pending == 0
    assert receiver.dedupe is not None
    assert len(receiver.dedupe) == 0


async def test_route_added_to_an_existing_app_sits_beside_its_routes(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/health", health)
    recorder = Recorder()
    receiver = add_webhook_route(app, recorder, token=TOKEN, path="/hooks/shipping")
    base = await serve(app)

    async with http.post(base + "/hooks/shipping", data=make_body()) as response:
        assert response.status == 202
    async with http.get(base + "/health") as response:
        assert await response.text() == "ok"
    async with http.get(base + "/hooks/shipping") as response:
        assert response.status == 405
    await receiver.join()

    assert len(recorder.events) == 1


def test_receiver_without_a_token_is_refused() -> None:
    with pytest.raises(ValueError, match="token"):
        WebhookReceiver(Recorder(), token="")


def test_receiver_repr_hides_the_token() -> None:
    assert TOKEN not in repr(WebhookReceiver(Recorder(), token=TOKEN))


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            b'{"object_type":"order","updated_value":"\xff\xfe","token":"x"}', id="invalid-utf8"
        ),
        pytest.param(b'{"pad":' + b"[" * 30_000, id="30000-nested-arrays"),
        pytest.param(
            msgspec.json.encode(event_fields(updated_at_utc="9999-12-31T23:59:59-23:59")),
            id="timestamp-overflowing-utc",
        ),
    ],
)
async def test_malformed_body_is_a_400_with_one_log_line_and_no_traceback(
    serve: Serve, http: aiohttp.ClientSession, body: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder()
    url, receiver = await started(serve, recorder)

    with caplog.at_level(logging.DEBUG):
        async with http.post(url, data=body) as response:
            assert response.status == 400
            assert "Traceback" not in await response.text()

    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1
    assert lines[0].exc_info is None
    assert receiver.stats.bad_payload == 1
    assert recorder.events == []


async def test_remembered_events_cost_a_fixed_size_whatever_their_values(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    async def drop(event: WebhookEvent) -> None:
        pass

    app = create_webhook_app(drop, token=TOKEN)
    url = await serve(app) + "/webhooks"
    receiver = app[WEBHOOK_RECEIVER]
    big = "x" * 30_000  # two such values: a 60 kB body, under the 64 KiB limit

    async def send(order_ids: range) -> None:
        for order_id in order_ids:
            body = make_body(object_id=order_id, original_value=big, updated_value=big)
            async with http.post(url, data=body) as response:
                assert response.status // 100 == 2
        await receiver.join()

    await send(range(20))  # warm up the connection and aiohttp's buffers
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        await send(range(20, 220))
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()

    assert receiver.dedupe is not None
    assert len(receiver.dedupe) == 220
    # 200 events of 60 kB each: 12 MB if values were kept; digests take ~40 kB.
    assert grown < 200 * DEDUPE_BYTES_PER_EVENT + 256 * 1024, grown
