"""The receiver as an aiohttp application or route, with aiohttp's own bounds set."""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import TypedDict, Unpack

from aiohttp import web

from shipping_async.clock import Clock
from shipping_async.webhooks._receiver import LegCounter, WebhookHandler, WebhookReceiver

__all__ = [
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_RECEIVE_BUFFER",
    "WEBHOOK_RECEIVER",
    "ReceiverOptions",
    "add_webhook_route",
    "create_webhook_app",
    "webhook_socket",
]

#: Seconds a connection may take to send a request's headers, and stay idle between
#: requests. The API sends a delivery at once; a sender trickling a header byte at a time
#: holds a connection for this long at most.
DEFAULT_HEADER_TIMEOUT = 10.0
#: Bytes the kernel buffers for one connection (SO_RCVBUF; Linux doubles it for its own
#: bookkeeping). aiohttp reads whatever a socket holds before the receiver sees the
#: request, so this, not the receiver, bounds what a sender that stalls mid-body puts into
#: the process: with it, 1,500 stalled 65,000-byte bodies cost about 30 MiB, not 120.
DEFAULT_RECEIVE_BUFFER = 4096
#: Request payload buffer of aiohttp (``read_bufsize``): past twice this, aiohttp stops
#: reading a connection until the receiver has taken the bytes.
_READ_BUFSIZE = 4096
# After a 413 aiohttp keeps reading and discarding the unread body ("lingering") so that
# the sender sees the answer rather than a reset; its default of 10 s is meant for
# uploads. An event is a few hundred bytes, so a receiver app lingers 1 s at most.
_LINGERING_TIME = 1.0


class ReceiverOptions(TypedDict, total=False):
    """The keyword options of :class:`WebhookReceiver`, accepted by the app helpers too."""

    max_body_size: int
    body_timeout: float
    handler_timeout: float
    max_concurrent_reads: int
    dedupe_size: int
    max_pending: int
    max_concurrent_handlers: int
    shutdown_timeout: float
    max_age: timedelta | None
    legs: LegCounter | None
    clock: Clock | None


#: Where :func:`create_webhook_app` keeps its receiver: ``app[WEBHOOK_RECEIVER].stats``.
WEBHOOK_RECEIVER = web.AppKey("shipping_async.webhook_receiver", WebhookReceiver)


def add_webhook_route(
    app: web.Application,
    handler: WebhookHandler,
    *,
    token: str,
    path: str = "/webhooks",
    **options: Unpack[ReceiverOptions],
) -> WebhookReceiver:
    """Add ``POST path`` to an existing app; its running handlers end with the app's shutdown.

    ::

        receiver = add_webhook_route(app, on_event, token=webhook.token, path="/hooks/shipping")

    The header deadline is the app's: build it with
    ``web.Application(handler_args={"keepalive_timeout": 10})`` (see
    :func:`create_webhook_app`).
    """
    receiver = WebhookReceiver(handler, token=token, **options)
    app.router.add_post(path, receiver.handle)
    app.on_shutdown.append(receiver.on_shutdown)
    return receiver


def create_webhook_app(
    handler: WebhookHandler,
    *,
    token: str,
    path: str = "/webhooks",
    header_timeout: float = DEFAULT_HEADER_TIMEOUT,
    **options: Unpack[ReceiverOptions],
) -> web.Application:
    """An aiohttp application that receives one webhook's deliveries on ``POST path``.

    ::

        async def on_event(event: WebhookEvent) -> None:
            print(event.object_id, event.event_type, event.updated_value)

        web.run_app(create_webhook_app(on_event, token=webhook.token), port=8080)

    The receiver is ``app[WEBHOOK_RECEIVER]`` (its ``stats``, ``pending``, ``join()``).
    ``header_timeout`` becomes aiohttp's ``keepalive_timeout`` for this app, which aiohttp
    (3.14 and later) arms when a connection opens and after each answer, and which closes
    a connection whose request has not fully arrived by then: the header deadline.
    """
    if header_timeout <= 0:
        raise ValueError("header_timeout: must be > 0 seconds")
    app = web.Application(
        handler_args={
            "lingering_time": _LINGERING_TIME,
            "keepalive_timeout": header_timeout,
            "read_bufsize": _READ_BUFSIZE,
        }
    )
    app[WEBHOOK_RECEIVER] = add_webhook_route(app, handler, token=token, path=path, **options)
    return app


def webhook_socket(
    host: str = "127.0.0.1", port: int = 0, *, receive_buffer: int = DEFAULT_RECEIVE_BUFFER
) -> socket.socket:
    """A bound TCP socket for the receiver whose connections buffer ``receive_buffer`` bytes.

    ::

        web.run_app(create_webhook_app(on_event, token=token), sock=webhook_socket("0.0.0.0", 8080))

    A delivery is a few hundred bytes, so a small kernel buffer costs the API nothing,
    while a sender that stalls mid-body is held back by TCP flow control in its own
    buffers instead of the receiver's memory.
    """
    if receive_buffer < 1:
        raise ValueError("receive_buffer: must be >= 1 byte")
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Set before listen(): accepted connections inherit it, and the TCP window they
        # announce is sized from it.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock
