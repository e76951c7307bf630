"""Hostile answers and careless calls against the SDK, over real loopback sockets: no error
path leaks the token (texts, frame locals, chained exceptions), answers are capped in
size after decompression, absurd learned windows are refused, header-unsafe multipart
values are refused."""

from __future__ import annotations

import asyncio
import gzip
import logging
import traceback
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import msgspec
import pytest

from shipping_async import (
    APIConnectionError,
    APIResponseValidationError,
    APITimeoutError,
    AsyncShippingClient,
    ConfigurationError,
    OrderOutcomeUnknownError,
    RequestValidationError,
    ShippingError,
)
from shipping_async._http import configure_logging
from shipping_async._retry import Operation, RetryPolicy
from shipping_async._send import send_with_retries
from shipping_async.clock import ManualClock
from shipping_async.errors import RateLimitError, error_for_status
from shipping_async.limiter import RollingWindowLimiter
from shipping_async.telemetry.logs import MAX_MESSAGE_CHARS
from tests.bulk.support import make_job

TOKEN = "tok-HOSTILE-0123456789abcdef"

Reply = Callable[[bytes], Awaitable[bytes | None]]
CREATE_ORDER = Operation(name="create_order", method="POST", path="/orders")


@asynccontextmanager
async def raw_server(reply: Reply) -> AsyncIterator[str]:
    """A loopback HTTP/1.1 server that answers every request with ``reply(request head)``:
    bytes to write (then close), or ``None`` to stay silent until the client gives up."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            answer = await reply(head)
            if answer is None:
                await asyncio.sleep(30)
            else:
                writer.write(answer)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/client_api/v2"
    finally:
        server.close()


def http(status: str, body: bytes, *headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", "Connection: close", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def echoing(status: str) -> Reply:
    """An answer that echoes the request head (token included) in its body and a header."""

    async def reply(head: bytes) -> bytes:
        echoed = head.decode("latin-1").replace("\r\n", " | ")
        body = f'{{"success": false, "error": "{echoed}"}}'.encode()
        return http(status, body, "Content-Type: application/json", f"X-Echo: {echoed}")

    return reply


def fixed(answer: bytes | None) -> Reply:
    async def reply(head: bytes) -> bytes | None:
        return answer

    return reply


def texts_of(error: BaseException) -> list[str]:
    """Everything that might be printed about ``error``: the traceback with every frame's
    locals, and for each exception of the chain its text, repr and attributes."""
    texts = [
        "".join(
            traceback.TracebackException(
                type(error), error, error.__traceback__, capture_locals=True
            ).format()
        )
    ]
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        texts += [str(current), repr(current), repr(vars(current))]
        request_info = getattr(current, "request_info", None)
        if request_info is not None:
            texts.append(repr(dict(request_info.headers)))
        pending += [current.__cause__, current.__context__]
    return texts


async def get_quote(base_url: str) -> None:
    async with AsyncShippingClient(TOKEN, base_url=base_url, max_retries=0, timeout=0.5) as c:
        await c.quotes.get(1)


async def create_order(base_url: str) -> None:
    async with AsyncShippingClient(TOKEN, base_url=base_url, max_retries=0, timeout=0.5) as c:
        await c.orders.create(make_job("PO-1").order.to_request(1))


GARBAGE = b"HTTP/1.1 2x0 what\r\nbroken header line\r\n\r\n"


@pytest.mark.parametrize(
    ("reply", "call", "expected"),
    [
        pytest.param(echoing("401 Unauthorized"), get_quote, ShippingError, id="401-echo"),
        pytest.param(echoing("422 Unprocessable"), get_quote, ShippingError, id="422-echo"),
        pytest.param(echoing("429 Too Many"), get_quote, ShippingError, id="429-echo"),
        pytest.param(echoing("500 Oops"), get_quote, ShippingError, id="500-echo"),
        pytest.param(echoing("200 OK"), get_quote, APIResponseValidationError, id="200-bad"),
        pytest.param(fixed(GARBAGE), get_quote, APIConnectionError, id="garbage-answer"),
        pytest.param(fixed(b""), get_quote, APIConnectionError, id="closed-at-once"),
        pytest.param(fixed(None), get_quote, APITimeoutError, id="silent"),
        pytest.param(fixed(GARBAGE), create_order, OrderOutcomeUnknownError, id="order-garbage"),
        pytest.param(fixed(None), create_order, OrderOutcomeUnknownError, id="order-silent"),
    ],
)
async def test_no_error_path_shows_the_token_in_locals_texts_or_chained_exceptions(
    reply: Reply, call: Callable[[str], Awaitable[None]], expected: type[BaseException]
) -> None:
    async with raw_server(reply) as base_url:
        with pytest.raises(expected) as caught:
            await call(base_url)

    for text in texts_of(caught.value):
        assert TOKEN not in text


async def test_a_refused_connection_shows_no_token() -> None:
    async with raw_server(fixed(b"")) as base_url:
        pass  # the port is closed again: nothing listens
    with pytest.raises(APIConnectionError) as caught:
        await get_quote(base_url)
    for text in texts_of(caught.value):
        assert TOKEN not in text


def test_a_client_refused_at_construction_shows_no_token() -> None:
    with pytest.raises(ConfigurationError) as caught:
        AsyncShippingClient(TOKEN, base_url="http://api.example.com/client_api/v2")
    for text in texts_of(caught.value):
        assert TOKEN not in text


async def test_the_request_headers_of_a_chained_aiohttp_error_are_redacted() -> None:
    async with raw_server(fixed(GARBAGE)) as base_url:
        with pytest.raises(APIConnectionError) as caught:
            await get_quote(base_url)
    cause = caught.value.__cause__
    assert cause is not None
    assert cause.__traceback__ is None
    request_info = getattr(cause, "request_info", None)
    if request_info is not None:
        assert request_info.headers["Authorization"] == "***"


# -- size cap ------------------------------------------------------------------------------


def gzip_bomb(size: int) -> bytes:
    compressor = zlib.compressobj(1, zlib.DEFLATED, 31)  # gzip framing
    block = b"\0" * (1 << 20)
    body = b"".join(compressor.compress(block) for _ in range(size >> 20))
    return body + compressor.flush()


async def test_a_gzip_answer_that_inflates_past_the_cap_is_refused_unread() -> None:
    bomb = gzip_bomb(128 << 20)  # 128 MiB of zeros in about 600 KiB
    answer = http("200 OK", bomb, "Content-Type: application/json", "Content-Encoding: gzip")
    async with raw_server(fixed(answer)) as base_url:
        client = AsyncShippingClient(TOKEN, base_url=base_url, max_retries=0, timeout=10)
        async with client:
            tracemalloc.start()
            try:
                with pytest.raises(APIResponseValidationError) as caught:
                    await client.quotes.get(1)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()

    assert "longer than 16777216 bytes" in str(caught.value)
    assert peak < 64 << 20, f"peak {peak >> 20} MiB"


async def test_the_answer_cap_is_configurable_and_a_declared_length_is_refused_early() -> None:
    body = b'{"id": 1, "padding": "' + b"x" * 5000 + b'"}'
    answer = http("200 OK", body, "Content-Type: application/json")
    async with raw_server(fixed(answer)) as base_url:
        client = AsyncShippingClient(
            TOKEN, base_url=base_url, max_retries=0, max_response_bytes=4096
        )
        async with client:
            with pytest.raises(APIResponseValidationError, match="longer than 4096 bytes"):
                await client.quotes.get(1)


def test_a_gzip_helper_sanity_check() -> None:
    assert len(gzip.decompress(gzip_bomb(2 << 20))) == 2 << 20


def chunked(body: bytes, *headers: str, piece: int = 1000) -> bytes:
    head = ["HTTP/1.1 200 OK", "Transfer-Encoding: chunked", "Connection: close", *headers]
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(body[at : at + piece]), body[at : at + piece])
        for at in range(0, len(body), piece)
    )
    return ("\r\n".join(head) + "\r\n\r\n").encode() + chunks + b"0\r\n\r\n"


QUOTE_WITH_PADDING = b'{"id": 1, "padding": "' + b"x" * 5000 + b'"}'


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(http("200 OK", QUOTE_WITH_PADDING), id="declared-length"),
        pytest.param(chunked(QUOTE_WITH_PADDING), id="chunked"),
    ],
)
async def test_an_answer_within_the_cap_reads_the_same_declared_or_chunked(answer: bytes) -> None:
    async with raw_server(fixed(answer)) as base_url:
        client = AsyncShippingClient(
            TOKEN, base_url=base_url, max_retries=0, max_response_bytes=len(QUOTE_WITH_PADDING)
        )
        async with client:
            quote = await client.quotes.get(1)
    assert quote.id == 1


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(chunked(QUOTE_WITH_PADDING), id="chunked"),
        # A small declared length does not let a chunked body past the cap.
        pytest.param(chunked(QUOTE_WITH_PADDING, "Content-Length: 10"), id="chunked-and-length"),
    ],
)
async def test_an_answer_over_the_cap_without_a_true_length_is_refused(answer: bytes) -> None:
    async with raw_server(fixed(answer)) as base_url:
        client = AsyncShippingClient(
            TOKEN, base_url=base_url, max_retries=0, max_response_bytes=4096
        )
        async with client:
            with pytest.raises((APIResponseValidationError, APIConnectionError)) as caught:
                await client.quotes.get(1)
    if isinstance(caught.value, APIResponseValidationError):
        assert "longer than 4096 bytes" in str(caught.value)


# -- learned windows -----------------------------------------------------------------------


async def order_after_a_429(
    body: bytes, clock: ManualClock, limiter: RollingWindowLimiter
) -> object:
    """An order sent under the retry rules: first refused with a 429 of ``body``, then
    created (``"created"``)."""
    answers: list[object] = [
        error_for_status(429, body, method="POST", path="/orders"),
        "created",
    ]

    async def attempt() -> object:
        answer = answers.pop(0)
        if isinstance(answer, RateLimitError):
            raise answer
        return answer

    return await send_with_retries(
        attempt, operation=CREATE_ORDER, policy=RetryPolicy(), clock=clock, limiter=limiter
    )


async def test_a_429_window_of_ten_years_is_refused_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock(auto_advance=True)
    limiter = RollingWindowLimiter(limit=20, window=60.0, clock=clock)

    started = clock.monotonic()
    with caplog.at_level(logging.WARNING, logger="shipping_async"):
        result = await order_after_a_429(
            b'{"success": false, "error": "1 of 1 in 315360000 seconds"}', clock, limiter
        )

    assert result == "created"
    assert limiter.window == 60.0
    assert clock.monotonic() - started < 3600
    assert "refused the window of the 429 text of 315360000 s" in caplog.text


async def test_a_429_text_with_escape_sequences_and_line_breaks_is_logged_escaped_and_cut(
    capsys: pytest.CaptureFixture[str],
) -> None:
    hostile = "20 of 20 in 60 seconds\x1b[2J\n2026-01-01 ERROR forged line" + "x" * 50_000
    clock = ManualClock(auto_advance=True)
    limiter = RollingWindowLimiter(limit=20, window=60.0, clock=clock)

    configure_logging("warning")  # the handler the CLI and SHIPPING_LOG use, on stderr
    try:
        result = await order_after_a_429(
            msgspec.json.encode({"success": False, "error": hostile}), clock, limiter
        )
    finally:
        logger = logging.getLogger("shipping_async")
        for handler in [h for h in logger.handlers if h.get_name() == "shipping_async.env"]:
            logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)

    assert result == "created"
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines  # the server's line break forged no line
    assert "\x1b" not in lines[0]
    assert "in 60 seconds\\x1b[2J\\n2026-01-01 ERROR forged line" in lines[0]
    assert len(lines[0]) < MAX_MESSAGE_CHARS + 200
    assert "more characters)" in lines[0]


# -- multipart -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(("inv\r\nX-Forged: 1.pdf", b"%PDF", "application/pdf"), id="filename"),
        pytest.param(("inv.pdf", b"%PDF", "application/pdf\r\nX-Forged: 1"), id="content-type"),
    ],
)
async def test_header_unsafe_multipart_values_raise_request_validation_error(
    spec: tuple[str, bytes, str],
) -> None:
    requests: list[bytes] = []

    async def record(head: bytes) -> bytes:
        requests.append(head)
        return http("201 Created", b"{}")

    async with (
        raw_server(record) as base_url,
        AsyncShippingClient(TOKEN, base_url=base_url, max_retries=0) as client,
    ):
        with pytest.raises(RequestValidationError, match="commercial_invoice"):
            await client.orders.create(
                make_job("PO-1").order.to_request(1), files={"commercial_invoice": spec}
            )
    assert requests == []
