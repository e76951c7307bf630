"""SHIPPING_LOG_FORMAT=json: one JSON object a line, stable keys, call and job fields, no secret."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from aioresponses import aioresponses
from resources.support import BASE_URL, TOKEN, MockAPI, make_client, order, order_request

from shipping_async.errors import OrderOutcomeUnknownError
from shipping_async.telemetry._scope import job_stage
from shipping_async.telemetry.logs import (
    KEYS,
    MAX_MESSAGE_CHARS,
    JsonFormatter,
    formatter,
    scrub,
)

ORDER_7001 = BASE_URL + "/orders/7001"
WEBHOOK_TOKEN = "whk_token_abc"


@pytest.fixture
def mock() -> Any:
    with MockAPI() as mocked:
        yield mocked


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    """What the shipping_async logger writes through a JSON handler, at DEBUG."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("shipping_async")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield out
    logger.removeHandler(handler)
    logger.setLevel(level)


def parsed(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_environment_variable_picks_the_json_formatter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SHIPPING_LOG_FORMAT", "json")
    assert isinstance(formatter("%(message)s"), JsonFormatter)
    monkeypatch.setenv("SHIPPING_LOG_FORMAT", "text")
    assert not isinstance(formatter("%(message)s"), JsonFormatter)


async def test_debug_and_retry_lines_parse_with_stable_keys_and_carry_call_and_job(
    mock: aioresponses, lines: io.StringIO
) -> None:
    mock.get(ORDER_7001, status=503, body=b"")
    mock.get(ORDER_7001, payload={"order": order()})

    async with make_client() as client:
        with job_stage("waybill", "A-17", "acme"):
            await client.orders.get(7001)

    records = parsed(lines)
    assert records
    assert all(tuple(record) == KEYS for record in records)
    retry = next(r for r in records if r["message"].startswith("retrying GET /orders/7001"))
    assert retry["level"] == "INFO"
    assert retry["logger"] == "shipping_async"
    assert (retry["operation"], retry["status"]) == ("get_order", 503)
    assert (retry["account"], retry["job_key"]) == ("acme", "A-17")
    assert retry["time"].endswith("+00:00")
    assert TOKEN not in lines.getvalue()
    assert "Bearer ***" in lines.getvalue()


async def test_an_unknown_outcome_warning_names_no_secret(
    mock: aioresponses, lines: io.StringIO
) -> None:
    mock.post(BASE_URL + "/orders", exception=aiohttp.ServerDisconnectedError())

    async with make_client() as client:
        with pytest.raises(OrderOutcomeUnknownError):
            await client.orders.create(order_request())

    warning = next(r for r in parsed(lines) if r["level"] == "WARNING")
    assert warning["operation"] == "create_order"
    assert warning["status"] is None
    assert TOKEN not in lines.getvalue()


@pytest.mark.parametrize(
    "leak",
    [
        pytest.param(f"header Authorization: Bearer {TOKEN}", id="bearer"),
        pytest.param(f'webhook {{"id": 77, "token": "{WEBHOOK_TOKEN}"}}', id="webhook-json"),
        pytest.param(f"callback https://x.test/h?token={WEBHOOK_TOKEN}", id="query"),
        pytest.param(f"journal postgresql://app:{TOKEN}@db/jobs", id="dsn"),
    ],
)
def test_a_secret_that_slipped_into_a_message_or_traceback_is_masked(
    leak: str, lines: io.StringIO
) -> None:
    logger = logging.getLogger("shipping_async")
    logger.warning("%s", leak, extra={"account": "acme"})
    try:
        raise RuntimeError(leak)
    except RuntimeError:
        logger.exception("failed")

    text = lines.getvalue()
    assert TOKEN not in text
    assert WEBHOOK_TOKEN not in text
    first, second = parsed(lines)
    assert first["account"] == "acme"
    assert "***" in first["message"]
    assert "***" in second["error"]
    assert "RuntimeError" in second["error"]


def test_control_characters_are_escaped_on_the_line() -> None:
    record = logging.LogRecord("shipping_async", logging.INFO, __file__, 1, "a\nb\x1b[2J", (), None)
    line = JsonFormatter().format(record)
    assert "\n" not in line
    assert "\x1b" not in line
    assert json.loads(line)["message"] == "a\nb\x1b[2J"


def test_text_lines_escape_what_the_message_quotes_and_keep_the_traceback_lines() -> None:
    try:
        raise RuntimeError("server said \x1b[2J\u202eevil")
    except RuntimeError:
        record = logging.LogRecord(
            "shipping_async", logging.ERROR, __file__, 1, "job %s: %s", ("K", "a\nb\x1b[2J"), None
        )
        record.exc_info = sys.exc_info()
    text = formatter("%(levelname)s %(message)s").format(record)

    first, *traceback_lines = text.splitlines()
    assert first == "ERROR job K: a\\nb\\x1b[2J"
    assert traceback_lines[0] == "Traceback (most recent call last):"
    assert traceback_lines[-1] == "RuntimeError: server said \\x1b[2J\\u202eevil"
    assert "\x1b" not in text
    assert "\u202e" not in text


def test_a_long_message_is_cut_saying_how_much_was_left_out() -> None:
    record = logging.LogRecord(
        "shipping_async", logging.INFO, __file__, 1, "%s", ("y" * 10_000,), None
    )
    text = formatter("%(message)s").format(record)
    line = json.loads(JsonFormatter().format(record))["message"]

    for shown in (text, line):
        assert (
            shown == "y" * MAX_MESSAGE_CHARS + f"... ({10_000 - MAX_MESSAGE_CHARS} more characters)"
        )


def test_scrub_leaves_ordinary_text_alone() -> None:
    text = "429 on POST /orders (20 of 20 in 60 seconds); pausing order creation for 61.2 s"
    assert scrub(text) == text
