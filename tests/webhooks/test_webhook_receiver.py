"""Tests of the aiohttp receiver on a real loopback server: answers, tasks, duplicates."""

from __future__ import annotations

import asyncio
import gc
import gzip
import logging
import socket
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta

import aiohttp
import msgspec
import pytest
from aiohttp import web
from hypothesis import given, settings
from yarl import URL

from shipping_async.clock import ManualClock
from shipping_async.models.webhooks import WebhookEvent
from shipping_async.webhooks import (
    DEDUPE_BYTES_PER_EVENT,
    DEFAULT_RECEIVE_BUFFER,
    MIN_FRESHNESS_WINDOW,
    WEBHOOK_RECEIVER,
    WebhookReceiver,
    add_webhook_route,
    create_webhook_app,
    webhook_socket,
)

from .support import TOKEN, BodyFactory, Serve, event_fields, hostile_bodies


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


async def post(http: aiohttp.ClientSession, url: str, body: bytes) -> tuple[int, str]:
    async with http.post(url, data=body) as response:
        return response.status, await response.text()


async def wait_until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not condition():  # noqa: ASYNC110 - the receiver offers no event for these counts
            await asyncio.sleep(0.005)


async def test_event_reaches_the_handler_before_the_200_answer(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    recorder = Recorder()
    url, receiver = await started(serve, recorder)

    assert await post(http, url, make_body()) == (200, "handled")

    assert [e.object_id for e in recorder.events] == [4201]
    assert receiver.stats.accepted == receiver.stats.handled == 1


async def test_answer_waits_for_the_handler(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    recorder = Recorder(gated=True)
    url, _ = await started(serve, recorder)

    answer = asyncio.create_task(post(http, url, make_body()))
    await wait_until(lambda: recorder.running == 1)
    await asyncio.sleep(0.05)
    assert not answer.done()
    recorder.gate.set()

    assert await answer == (200, "handled")
    assert len(recorder.events) == 1


async def test_handler_failure_is_answered_500_and_the_apis_retry_reaches_the_handler(
    serve: Serve,
    http: aiohttp.ClientSession,
    make_body: BodyFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[int] = []

    async def fails_once(event: WebhookEvent) -> None:
        calls.append(event.object_id)
        if len(calls) == 1:
            raise RuntimeError("database is down")

    url, receiver = await started(serve, fails_once)  # type: ignore[arg-type]

    with caplog.at_level(logging.ERROR, logger="shipping_async.webhooks"):
        first = await post(http, url, make_body(object_id=13))
    retry = await post(http, url, make_body(object_id=13))
    again = await post(http, url, make_body(object_id=13))

    assert (first[0], retry, again) == (500, (200, "handled"), (200, "duplicate"))
    assert calls == [13, 13]
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "object_id=13" in record.getMessage()
    assert "database is down" in caplog.text
    assert TOKEN not in caplog.text
    assert (receiver.stats.handler_errors, receiver.stats.handled) == (1, 1)


async def test_a_recorder_runs_before_the_handler_and_its_failure_is_retried_whole(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    order: list[str] = []
    failures = ["evidence store is down"]

    async def record(event: WebhookEvent) -> None:
        order.append(f"record {event.object_id}")
        if failures:
            raise OSError(failures.pop())

    async def handle(event: WebhookEvent) -> None:
        order.append(f"handle {event.object_id}")

    url, receiver = await started(serve, handle)  # type: ignore[arg-type]
    receiver.add_recorder(record)

    first = await post(http, url, make_body(object_id=21))
    retry = await post(http, url, make_body(object_id=21))
    receiver.remove_recorder(record)
    later = await post(http, url, make_body(object_id=22))

    assert (first[0], retry) == (500, (200, "handled"))  # not handled: the API retries
    assert later == (200, "handled")
    assert order == ["record 21", "record 21", "handle 21", "handle 22"]


async def test_handler_running_past_its_timeout_is_answered_500_and_retried(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    calls = 0

    async def slow_once(event: WebhookEvent) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            await asyncio.sleep(5)

    url, receiver = await started(serve, slow_once, handler_timeout=0.1)  # type: ignore[arg-type]

    assert (await post(http, url, make_body()))[0] == 500
    assert await post(http, url, make_body()) == (200, "handled")
    assert calls == 2
    assert receiver.stats.handler_errors == 1


async def test_wrong_token_is_answered_401_and_never_handled(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    recorder = Recorder()
    url, receiver = await started(serve, recorder)

    async with http.post(url, data=make_body(token="whk_forged")) as response:
        assert response.status == 401
        assert TOKEN not in await response.text()

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
    assert await post(http, url, make_body()) == (200, "handled")

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


class Stream:
    """A body stream that counts the chunks taken from it."""

    def __init__(self, chunk: bytes, count: int) -> None:
        self.chunk, self.left, self.taken = chunk, count, 0

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> bytes:
        if not self.left:
            raise StopAsyncIteration
        self.left -= 1
        self.taken += 1
        return self.chunk


async def test_body_reader_stops_at_the_first_chunk_past_the_limit() -> None:
    receiver = WebhookReceiver(Recorder(), token=TOKEN, max_body_size=65_536)
    stream = Stream(b"z" * 65_536, 150)  # 10 MB offered

    answer = await receiver.receive(stream)

    assert answer.status == 413
    assert answer.close
    assert stream.taken == 2


async def test_declared_length_over_the_limit_is_refused_before_reading() -> None:
    receiver = WebhookReceiver(Recorder(), token=TOKEN, max_body_size=1_000)
    stream = Stream(b"z" * 2_000, 1)

    answer = await receiver.receive(stream, {"Content-Length": "2000"})

    assert answer.status == 413
    assert stream.taken == 0


async def test_neutral_entry_takes_bytes_and_answers_with_the_event(
    make_body: BodyFactory,
) -> None:
    recorder = Recorder()
    receiver = WebhookReceiver(recorder, token=TOKEN)

    answer = await receiver.receive(make_body(), {"content-type": "application/json"})
    refused = await receiver.receive(b"{", {})

    assert (answer.status, answer.text, answer.close) == (200, "handled", False)
    assert answer.event is not None
    assert answer.event.object_id == 4201
    assert (refused.status, refused.event) == (400, None)
    assert len(recorder.events) == 1


async def test_duplicate_delivery_is_answered_200_and_handled_once(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    recorder = Recorder()
    url, receiver = await started(serve, recorder)

    answers = [await post(http, url, make_body()) for _ in range(3)]

    assert answers == [(200, "handled"), (200, "duplicate"), (200, "duplicate")]
    assert len(recorder.events) == 1
    assert receiver.stats.duplicates == 2


async def test_concurrent_duplicates_are_handled_once(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    recorder = Recorder()
    url, _ = await started(serve, recorder)

    answers = await asyncio.gather(*(post(http, url, make_body()) for _ in range(20)))

    assert sorted(answers) == [(200, "duplicate")] * 19 + [(200, "handled")]
    assert len(recorder.events) == 1


async def test_repeat_during_a_failing_first_handling_is_handled_after_it(
    make_body: BodyFactory,
) -> None:
    gate = asyncio.Event()
    calls = 0

    async def first_fails(event: WebhookEvent) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            await gate.wait()
            raise RuntimeError("lost the database mid-way")

    receiver = WebhookReceiver(first_fails, token=TOKEN)
    first = asyncio.create_task(receiver.receive(make_body()))
    await wait_until(lambda: calls == 1)
    repeat = asyncio.create_task(receiver.receive(make_body()))
    await asyncio.sleep(0.02)
    assert not repeat.done()  # it waits for the first handling's outcome
    gate.set()

    assert ((await first).status, (await repeat).text) == (500, "handled")
    assert calls == 2


async def test_duplicate_memory_is_bounded_by_dedupe_size(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    recorder = Recorder()
    url, receiver = await started(serve, recorder, dedupe_size=2)

    for order_id in (1, 2, 3, 1):
        assert await post(http, url, make_body(object_id=order_id)) == (200, "handled")

    assert receiver.dedupe is not None
    assert len(receiver.dedupe) == 2
    assert [e.object_id for e in recorder.events] == [1, 2, 3, 1]


async def test_handlers_run_at_most_max_concurrent_handlers_at_a_time(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    recorder = Recorder(gated=True)
    url, receiver = await started(serve, recorder, max_concurrent_handlers=2)

    answers = [
        asyncio.create_task(post(http, url, make_body(object_id=order_id))) for order_id in range(5)
    ]
    await wait_until(lambda: receiver.pending == 5)
    assert recorder.running == 2
    recorder.gate.set()

    assert [status for status, _ in await asyncio.gather(*answers)] == [200] * 5
    assert recorder.most_running == 2
    assert len(recorder.events) == 5


async def test_full_queue_answers_503_and_does_not_remember_the_refused_event(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    recorder = Recorder(gated=True)
    url, receiver = await started(serve, recorder, max_pending=1)

    first = asyncio.create_task(post(http, url, make_body(object_id=1)))
    await wait_until(lambda: receiver.pending == 1)
    assert (await post(http, url, make_body(object_id=2)))[0] == 503
    recorder.gate.set()
    assert await first == (200, "handled")
    assert await post(http, url, make_body(object_id=2)) == (200, "handled")  # the retry

    assert [e.object_id for e in recorder.events] == [1, 2]
    assert receiver.stats.refused_busy == 1


async def test_close_waits_for_running_handlers_then_refuses_503(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    recorder = Recorder(gated=True)
    url, receiver = await started(serve, recorder)
    first = asyncio.create_task(post(http, url, make_body(object_id=1)))
    await wait_until(lambda: receiver.pending == 1)

    asyncio.get_running_loop().call_later(0.05, recorder.gate.set)
    await receiver.close()

    assert await first == (200, "handled")
    assert (await post(http, url, make_body(object_id=2)))[0] == 503
    assert [e.object_id for e in recorder.events] == [1]


async def test_close_cancels_handlers_past_the_grace_and_the_event_stays_unhandled(
    make_body: BodyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder(gated=True)
    receiver = WebhookReceiver(recorder, token=TOKEN, shutdown_timeout=0.05)
    answer = asyncio.create_task(receiver.receive(make_body(object_id=77)))
    await wait_until(lambda: receiver.pending == 1)

    with caplog.at_level(logging.WARNING, logger="shipping_async.webhooks"):
        await receiver.close()

    assert answer.cancelled()  # never answered 2xx: the API retries it
    assert receiver.pending == 0
    assert receiver.dedupe is not None
    assert len(receiver.dedupe) == 0
    assert "object_id=77" in caplog.text
    assert recorder.events == []


async def test_delivery_still_being_read_when_close_starts_is_refused_503(
    make_body: BodyFactory,
) -> None:
    recorder = Recorder()
    receiver = WebhookReceiver(recorder, token=TOKEN)
    arrived = asyncio.Event()

    async def late_body() -> AsyncIterator[bytes]:
        await arrived.wait()
        yield make_body()

    answer = asyncio.create_task(receiver.receive(late_body()))
    await asyncio.sleep(0.01)  # the receiver now waits for the body
    await receiver.close()
    arrived.set()

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

    assert await post(http, base + "/hooks/shipping", make_body()) == (200, "handled")
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


class Legs:
    """A ``legs`` counter answering ``count`` (or raising), recording its calls."""

    def __init__(self, count: int | None) -> None:
        self.count = count
        self.calls = 0

    async def __call__(self, event: WebhookEvent) -> int:
        self.calls += 1
        if self.count is None:
            raise aiohttp.ClientConnectionError("the API is unreachable")
        return self.count


async def test_identical_events_of_two_legs_both_reach_the_handler_and_a_third_is_dropped(
    make_body: BodyFactory,
) -> None:
    recorder = Recorder()
    legs = Legs(2)
    receiver = WebhookReceiver(recorder, token=TOKEN, legs=legs)
    body = make_body(original_value="", updated_value="order_received")

    answers = [await receiver.receive(body) for _ in range(3)]

    assert [a.text for a in answers] == ["handled", "handled", "duplicate"]
    assert len(recorder.events) == 2
    assert legs.calls == 2  # the first delivery of a body costs no lookup


async def test_identical_concurrent_events_of_two_legs_both_reach_the_handler(
    make_body: BodyFactory,
) -> None:
    recorder = Recorder(gated=True)
    receiver = WebhookReceiver(recorder, token=TOKEN, legs=Legs(2))
    body = make_body(original_value="", updated_value="order_received")

    answers = [asyncio.create_task(receiver.receive(body)) for _ in range(2)]
    await wait_until(lambda: recorder.running == 2)
    recorder.gate.set()

    assert [(await a).text for a in answers] == ["handled", "handled"]


async def test_repeat_of_a_one_leg_order_is_a_duplicate(make_body: BodyFactory) -> None:
    recorder = Recorder()
    receiver = WebhookReceiver(recorder, token=TOKEN, legs=Legs(1))

    answers = [(await receiver.receive(make_body())).text for _ in range(2)]

    assert answers == ["handled", "duplicate"]


async def test_repeat_whose_legs_cannot_be_counted_is_answered_503_for_a_retry(
    make_body: BodyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder()
    receiver = WebhookReceiver(recorder, token=TOKEN, legs=Legs(None))
    await receiver.receive(make_body())

    with caplog.at_level(logging.WARNING, logger="shipping_async.webhooks"):
        answer = await receiver.receive(make_body())

    assert answer.status == 503
    assert "4201" in caplog.text
    assert len(recorder.events) == 1


async def test_receiver_refuses_a_stale_event_by_its_clock(make_body: BodyFactory) -> None:
    recorder = Recorder()
    clock = ManualClock(wall_origin=datetime(2026, 1, 5, 9, 0, tzinfo=UTC))
    receiver = WebhookReceiver(recorder, token=TOKEN, max_age=timedelta(minutes=10), clock=clock)

    assert (await receiver.receive(make_body())).status == 200
    clock.advance(11 * 60)
    stale = await receiver.receive(make_body(object_id=5))

    assert stale.status == 400
    assert "updated_at_utc" in stale.text
    assert len(recorder.events) == 1


def test_freshness_window_shorter_than_the_apis_retries_is_refused() -> None:
    with pytest.raises(ValueError, match="max_age"):
        WebhookReceiver(Recorder(), token=TOKEN, max_age=timedelta(seconds=60))


async def open_connection(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    address = URL(url)
    assert address.host is not None
    assert address.port is not None
    return await asyncio.open_connection(address.host, address.port)


async def closed_after(reader: asyncio.StreamReader, limit: float) -> tuple[float, bytes]:
    """Seconds until the server closes the connection, and what it answered before."""
    started_at = time.monotonic()
    async with asyncio.timeout(limit):
        answer = await reader.read()  # until EOF
    return time.monotonic() - started_at, answer


async def test_sender_trickling_header_bytes_is_cut_off_at_the_header_deadline(
    serve: Serve, make_body: BodyFactory
) -> None:
    url, _ = await started(serve, Recorder(), header_timeout=0.5)
    reader, writer = await open_connection(url)

    async def trickle() -> None:
        for byte in b"POST /webhooks HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
            writer.write(bytes([byte]))
            await asyncio.sleep(0.05)

    sender = asyncio.create_task(trickle())
    try:
        seconds, answer = await closed_after(reader, 3)
    finally:
        sender.cancel()
        writer.close()

    assert 0.4 <= seconds < 1.5
    assert answer == b""


async def test_stalled_body_is_answered_408_and_closed_at_the_body_deadline(
    serve: Serve, make_body: BodyFactory
) -> None:
    url, receiver = await started(serve, Recorder(), body_timeout=0.3)
    reader, writer = await open_connection(url)
    body = make_body()
    writer.write(
        b"POST /webhooks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body[:-10]
    )
    try:
        seconds, answer = await closed_after(reader, 3)
    finally:
        writer.close()

    assert 0.25 <= seconds < 1.5
    assert answer.startswith(b"HTTP/1.1 408")
    assert receiver.stats.timed_out == 1


async def test_bodies_past_the_read_cap_are_refused_503_without_being_read(
    serve: Serve, http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    url, receiver = await started(serve, Recorder(), max_concurrent_reads=2, body_timeout=0.5)
    stalled = []
    for _ in range(2):
        reader, writer = await open_connection(url)
        writer.write(
            b"POST /webhooks HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b"{" * 500
        )
        stalled.append((reader, writer))
    await asyncio.sleep(0.1)

    busy = await post(http, url, make_body())
    for reader, writer in stalled:
        await closed_after(reader, 3)
        writer.close()
    after = await post(http, url, make_body())

    assert busy[0] == 503
    assert after == (200, "handled")
    assert receiver.stats.timed_out == 2


async def test_receiver_on_webhook_socket_takes_deliveries_with_a_small_kernel_buffer(
    http: aiohttp.ClientSession, make_body: BodyFactory
) -> None:
    recorder = Recorder()
    runner = web.AppRunner(create_webhook_app(recorder, token=TOKEN))
    await runner.setup()
    sock = webhook_socket("127.0.0.1", 0)
    try:
        # Linux doubles SO_RCVBUF for its bookkeeping; the default is about 128 KiB.
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) <= 4 * DEFAULT_RECEIVE_BUFFER
        await web.SockSite(runner, sock).start()
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/webhooks"
        big = "x" * 30_000  # a 60 kB body still arrives whole through the small window

        assert await post(http, url, make_body(updated_value=big)) == (200, "handled")
    finally:
        await runner.cleanup()

    assert recorder.events[0].updated_value == big


@settings(max_examples=200, deadline=None)
@given(body=hostile_bodies)
def test_no_body_is_answered_5xx(body: bytes) -> None:
    async def ignore(event: WebhookEvent) -> None:
        pass

    receiver = WebhookReceiver(ignore, token=TOKEN, max_age=MIN_FRESHNESS_WINDOW)

    answer = asyncio.run(receiver.receive(body))

    assert answer.status in (200, 400, 401, 413)


async def test_gzip_bomb_is_cut_off_at_the_limit_after_inflating(
    serve: Serve, http: aiohttp.ClientSession
) -> None:
    url, receiver = await started(serve, Recorder())
    bomb = gzip.compress(b"[" * 50_000_000, 9)  # 50 MB from about 50 kB

    headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
    async with asyncio.timeout(5), http.post(url, data=bomb, headers=headers) as response:
        assert response.status == 413
    assert receiver.stats.too_large == 1
