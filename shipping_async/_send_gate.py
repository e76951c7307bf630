"""The last moment before an order's bytes are written: where its intent is recorded.

A journalled order records its intent durably before its request may leave (see
:data:`shipping_async._retry.order_intent`). Every moment between that commit and the
first byte on the wire is a moment in which a crash leaves the job ``unknown`` although
the server never heard of it. So the intent is not recorded before the request starts
but inside the writing of its body: aiohttp holds the request's headers back until the
first body chunk (it sends both in one write), and :class:`GatedBody` opens the attempt's
:class:`SendGate` right before handing aiohttp that chunk. Waits that may be long (DNS,
the TCP handshake, a pool slot) come before the intent; a connection that never opens
leaves no intent at all.

The commit is awaited (the SQLite journal group-commits the intents that arrive
together: one fsync for them all), and its ``sending`` step runs once it is done, in
the writer's own task, with nothing between it and the request's first byte: the SQLite
journal appends the order's sent mark there, so that a crash anywhere before that line
is told apart from a request on the wire (see :mod:`shipping_async.bulk._sent_marks`).

A multipart order body is built by aiohttp itself: for it the gate is opened just before
the attempt starts (``at_write`` false), as close as the client gets. Either way
:func:`stopped_at` tells the retry rules when the request certainly never left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import Any

from aiohttp.abc import AbstractStreamWriter
from aiohttp.payload import BytesPayload

from shipping_async._order_wait import run_to_the_end

__all__ = ["GatedBody", "SendGate", "send_gate", "stopped_at"]

Grant = Callable[[], Coroutine[Any, Any, None]]


class SendGate:
    """Runs ``grant`` once, when the request is about to be written; remembers how it went.

    ``grant`` (recording the intent) is never interrupted half-way: it runs to its end in
    a task of its own even if the writer is cancelled meanwhile (the request's timeout,
    a stopping run), so that the caller knows for sure whether the intent was recorded.
    Then ``sending`` (if given) runs in the writer's task, right before the request is
    written, with no await in between; if it raises, nothing is written.
    """

    __slots__ = (
        "_done",
        "_finished",
        "_grant",
        "_sending",
        "at_write",
        "error",
        "opened",
        "passed",
    )

    def __init__(
        self, grant: Grant, *, at_write: bool, sending: Callable[[], None] | None = None
    ) -> None:
        self._grant = grant
        self._sending = sending
        self.at_write = at_write
        self.opened = False  # grant was started
        self.passed = False  # grant finished: the request may be written from now on
        self.error: BaseException | None = None  # what grant raised (nothing is sent)
        self._finished = False  # grant ended, one way or the other
        # Made only for whoever waits on a grant still running (rare: a writer cancelled
        # mid-grant): an Event per order would cost more than the gate itself.
        self._done: asyncio.Event | None = None

    async def open(self) -> None:
        """Run ``grant`` (once); raises what it raised, or ``CancelledError``."""
        if self.opened:
            await self.settled()
            if self.error is not None:
                raise self.error
            return
        self.opened = True
        try:
            await run_to_the_end(self._grant())
            # From here to the request's first byte nothing awaits.
            if self._sending is not None:
                self._sending()
        except BaseException as exc:
            self.error = exc
            raise
        else:
            self.passed = True
        finally:
            self._finished = True
            if self._done is not None:
                self._done.set()

    async def settled(self) -> None:
        """Wait until an opened gate's ``grant`` has finished (its writer may have been
        cancelled while the grant goes on): only then is :func:`stopped_at` final."""
        if self.opened and not self._finished:
            if self._done is None:
                self._done = asyncio.Event()
            await self._done.wait()

    def refusal(self) -> BaseException | None:
        """What ``grant`` raised, unless it was a cancellation (the caller's to raise)."""
        if isinstance(self.error, asyncio.CancelledError):
            return None
        return self.error


def stopped_at(gate: SendGate | None) -> bool:
    """Whether the attempt was opening ``gate`` and did not pass: nothing was written,
    whatever its error says. A gate never opened proves nothing (the request may have
    gone another way, e.g. through a mocked session): then its error decides, as ever."""
    return gate is not None and gate.opened and not gate.passed


#: The gate of the order attempt running in this context (set by ``send_with_retries``).
send_gate: ContextVar[SendGate | None] = ContextVar("send_gate", default=None)


class GatedBody(BytesPayload):
    """A JSON body whose first write opens ``gate`` (records the order intent) first.

    aiohttp (3.14) buffers the request line and headers until the body's first chunk
    and sends them together, so nothing of the request leaves before the gate passed.
    """

    def __init__(self, value: bytes, gate: SendGate) -> None:
        super().__init__(value, content_type="application/json")
        self._gate = gate

    async def write(self, writer: AbstractStreamWriter) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(
        self, writer: AbstractStreamWriter, content_length: int | None
    ) -> None:
        await self._gate.open()
        # Nothing between the gate's sending step and this write.
        await super().write_with_length(writer, content_length)
