"""``shipping-async webhooks listen``: a receiver that prints each event as it arrives."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import Callable
from typing import TextIO

import msgspec
from aiohttp import web

from shipping_async.cli._terminal import printable
from shipping_async.models.webhooks import WebhookEvent
from shipping_async.webhooks import create_webhook_app, webhook_socket

__all__ = ["format_event", "listen", "register"]

TOKEN_ENV = "SHIPPING_WEBHOOK_TOKEN"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``webhooks`` (with its ``listen`` sub-command) to the ``shipping-async`` parser."""
    parser = subparsers.add_parser("webhooks", help="receive webhook deliveries")
    commands = parser.add_subparsers(dest="webhooks_command", required=True, metavar="COMMAND")
    listen_parser = commands.add_parser(
        "listen",
        help="run a receiver and print one line per event",
        description=(
            "Receive deliveries on POST http://HOST:PORT/PATH, check each body and token, drop "
            "duplicates, and print one line per event (flushed). Refused deliveries are "
            "answered 400/401/413 and reported on stderr."
        ),
    )
    listen_parser.add_argument("--port", type=int, required=True, help="port (0: any free one)")
    listen_parser.add_argument(
        "--token",
        help=f"the webhook's token (default: ${TOKEN_ENV}; the environment keeps it out of ps)",
    )
    listen_parser.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    listen_parser.add_argument("--path", default="/webhooks", help="path (default /webhooks)")
    listen_parser.add_argument(
        "--json", action="store_true", help="print each event as one JSON object (no token)"
    )
    listen_parser.set_defaults(handler=_listen_command)


def format_event(event: WebhookEvent, *, as_json: bool = False) -> str:
    """One line for one event; the token is never printed.

    ``2026-01-05T09:00:00.123Z order 42 shipment.updated.status: order_received -> in_transit``

    The values come from the sender: a newline or an escape sequence in them is written
    escaped (``\\n``, ``\\x1b``), so it can neither forge a line nor drive the terminal.
    """
    if as_json:
        fields = msgspec.structs.asdict(event)
        del fields["token"]
        fields["updated_at_utc"] = _iso_millis(event)
        # msgspec escapes U+0000-U+001F; the C1 controls and bidi overrides pass through.
        return _JSON_UNSAFE.sub(_json_escape, msgspec.json.encode(fields).decode())
    return printable(
        f"{_iso_millis(event)} {event.object_type} {event.object_id} {event.event_type}: "
        f"{event.original_value} -> {event.updated_value}"
    )


_JSON_UNSAFE = re.compile(r"[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match[0]):04x}"


def _iso_millis(event: WebhookEvent) -> str:
    return event.updated_at_utc.isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def listen(
    *,
    host: str,
    port: int,
    token: str,
    path: str = "/webhooks",
    out: TextIO = sys.stdout,
    as_json: bool = False,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve until ``stop`` is set (forever without one); ``on_ready`` gets the URL."""

    async def print_event(event: WebhookEvent) -> None:
        print(format_event(event, as_json=as_json), file=out, flush=True)

    runner = web.AppRunner(create_webhook_app(print_event, token=token, path=path))
    await runner.setup()
    try:
        # A small kernel buffer per connection keeps stalled senders out of our memory.
        site = web.SockSite(runner, webhook_socket(host, port))
        await site.start()
        bound_host, bound_port = runner.addresses[0][:2]
        url = f"http://{bound_host}:{bound_port}{path}"
        if on_ready is not None:
            on_ready(url)
        await (stop or asyncio.Event()).wait()
    finally:
        await runner.cleanup()


def _listen_command(args: argparse.Namespace) -> int:
    token = args.token or os.environ.get(TOKEN_ENV, "")
    if not token:
        print(f"webhooks listen: give --token or set {TOKEN_ENV}", file=sys.stderr)
        return 2
    path = args.path if args.path.startswith("/") else "/" + args.path

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        await listen(
            host=args.host,
            port=args.port,
            token=token,
            path=path,
            as_json=args.json,
            stop=stop,
            on_ready=lambda url: print(f"listening on {url}", file=sys.stderr, flush=True),
        )

    try:
        asyncio.run(main())
    except OSError as exc:
        print(f"webhooks listen: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0
