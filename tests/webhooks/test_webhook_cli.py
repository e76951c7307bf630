"""Tests of ``shipping-async webhooks listen``: parser, one flushed line per event."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import signal
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import aiohttp
import msgspec
import pytest

from shipping_async.cli import webhooks as cli
from shipping_async.models.webhooks import WebhookEvent

from .support import TOKEN, BodyFactory


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="shipping-async")
    cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_listen_parses_port_token_host_and_path() -> None:
    args = parse("webhooks", "listen", "--port", "8099", "--token", TOKEN, "--path", "/hooks")

    assert (args.port, args.token, args.host, args.path) == (8099, TOKEN, "127.0.0.1", "/hooks")
    assert args.handler is cli._listen_command


def test_listen_defaults_to_loopback_and_slash_webhooks() -> None:
    args = parse("webhooks", "listen", "--port", "0")

    assert (args.host, args.path, args.json) == ("127.0.0.1", "/webhooks", False)


def test_listen_without_a_token_exits_2_and_says_how_to_give_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(cli.TOKEN_ENV, raising=False)
    args = parse("webhooks", "listen", "--port", "0")

    assert args.handler(args) == 2
    assert cli.TOKEN_ENV in capsys.readouterr().err


EVENT = WebhookEvent(
    object_type="order",
    object_id=4201,
    event_type="shipment.updated.status",
    original_value="order_received",
    updated_value="in_transit",
    updated_at_utc=datetime(2026, 1, 5, 9, 0, 0, 123000, tzinfo=UTC),
    token=TOKEN,
)


def test_event_line_is_readable_and_has_no_token() -> None:
    line = cli.format_event(EVENT)

    assert line == (
        "2026-01-05T09:00:00.123Z order 4201 shipment.updated.status: order_received -> in_transit"
    )


def test_json_line_has_every_field_but_the_token() -> None:
    fields = json.loads(cli.format_event(EVENT, as_json=True))

    assert "token" not in fields
    assert fields["object_id"] == 4201
    assert fields["updated_at_utc"] == "2026-01-05T09:00:00.123Z"


FORGED = "in_transit\n2026-01-05T09:00:01.000Z order 1 shipment.updated.status: x -> delivered"


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(FORGED, id="newline-forging-a-line"),
        pytest.param("\x1b[2J\x1b[31mdelivered", id="escape-sequences"),
        pytest.param("delivered\r\x9b31m\u202eevil", id="cr-c1-bidi"),
    ],
)
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_event_values_cannot_forge_lines_or_drive_the_terminal(value: str, as_json: bool) -> None:
    event = msgspec.structs.replace(EVENT, original_value=value, updated_value=value)

    line = cli.format_event(event, as_json=as_json)

    assert line.isprintable()  # no newline, CR, ESC, C1 or bidi control left
    if as_json:
        assert json.loads(line)["updated_value"] == value
    else:
        assert value.encode("unicode_escape").decode("ascii") in line


@contextlib.asynccontextmanager
async def listening() -> AsyncIterator[tuple[str, io.StringIO]]:
    """``webhooks listen`` on a free port for the block: its URL and what it printed."""
    out = io.StringIO()
    stop = asyncio.Event()
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    server = asyncio.create_task(
        cli.listen(host="127.0.0.1", port=0, token=TOKEN, out=out, stop=stop,
                   on_ready=ready.set_result)
    )  # fmt: skip
    try:
        yield await asyncio.wait_for(ready, 5), out
    finally:
        stop.set()
        await asyncio.wait_for(server, 5)


async def test_listen_prints_a_forged_newline_as_one_escaped_line(make_body: BodyFactory) -> None:
    async with (
        listening() as (url, out),
        aiohttp.ClientSession() as http,
        http.post(url, data=make_body(updated_value=FORGED)) as response,
    ):
        assert response.status == 200

    [line] = out.getvalue().splitlines()
    assert line.endswith("x -> delivered")
    assert "in_transit\\n2026" in line


async def test_listen_prints_one_line_per_accepted_event(make_body: BodyFactory) -> None:
    statuses = []
    async with listening() as (url, out), aiohttp.ClientSession() as http:
        for body in (
            make_body(object_id=1),
            make_body(object_id=1),  # duplicate: dropped
            make_body(object_id=2, token="whk_wrong"),  # refused
            make_body(object_id=3, updated_value="delivered"),
        ):
            async with http.post(url, data=body) as response:
                statuses.append(response.status)

    assert statuses == [200, 200, 401, 200]
    lines = out.getvalue().splitlines()
    assert [line.split()[2] for line in lines] == ["1", "3"]
    assert lines[1].endswith("order_received -> delivered")
    assert TOKEN not in out.getvalue()


# The command as the lead will register it (``_COMMAND_MODULES``); run through register()
# so the test does not depend on that registration.
_RUN_CLI = """
import argparse, sys
from shipping_async.cli import webhooks
parser = argparse.ArgumentParser(prog="shipping-async")
webhooks.register(parser.add_subparsers(dest="command", required=True))
args = parser.parse_args(sys.argv[1:])
sys.exit(args.handler(args))
"""


async def test_listen_command_flushes_each_line_while_running_and_exits_0_on_sigint(
    make_body: BodyFactory,
) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _RUN_CLI, "webhooks", "listen", "--port", "0",
        env={"SHIPPING_WEBHOOK_TOKEN": TOKEN, "PATH": ""},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    assert process.stderr is not None
    try:
        banner = (await asyncio.wait_for(process.stderr.readline(), 20)).decode()
        url = banner.removeprefix("listening on ").strip()
        async with aiohttp.ClientSession() as http, http.post(url, data=make_body()) as response:
            assert response.status == 200
        line = (await asyncio.wait_for(process.stdout.readline(), 10)).decode()
        assert line.endswith("4201 shipment.updated.status: order_received -> in_transit\n")
    finally:
        process.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(process.wait(), 10)
    assert code == 0
