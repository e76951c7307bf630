"""Injected faults: for the next N requests matching a method and a path pattern.

Kinds (wire names of ``POST /_sandbox/faults``):

- ``status``: answer ``status`` (400-599) with a JSON error body; the request is not
  processed (a gateway answered in the service's place). A 429 without ``message``
  says what the sandbox's own 429 says (``20 of 20 in 0.6 seconds`` at speed 100).
- ``status_after``: process the request (an order IS created), then answer ``status``
  (400-599) instead of its answer: a gateway that failed after the service acted.
- ``delay``: wait ``seconds`` of sandbox time, then process the request normally.
- ``delay_after``: process the request (an order IS created), then wait ``seconds`` of
  sandbox time before answering: a slow answer a client may give up on.
- ``drop_before``: close the connection without processing anything.
- ``drop_after``: process the request (an order IS created), then close the connection
  instead of answering: the ambiguous case a client must survive.
- ``malformed``: process the request, then answer its status with the JSON body cut in
  half.
- ``carrier_rejection``: POST /orders/{id}/schedule_pickups answers 201 with the carrier's
  ``message`` in ``error_message``; consumed only by a pickup request that passed
  validation (no other request consumes it).

Paths are relative to ``/client_api/v2``; ``*`` matches exactly one path segment
(``/orders/*/waybills``). Method ``*`` matches any method. When several faults match, the
oldest applies; each request consumes at most one fault.
"""

from __future__ import annotations

from http import HTTPStatus

import msgspec

from shipping_async.sandbox._schemas import FaultKind, FaultRequest

__all__ = ["DEFAULT_CARRIER_MESSAGE", "Fault", "FaultBook", "path_matches"]

DEFAULT_CARRIER_MESSAGE = "Carrier rejected the pickup request: no courier is available"


class Fault(msgspec.Struct, kw_only=True):
    """An active fault and how many more requests it will hit."""

    id: int
    kind: FaultKind
    method: str
    path: str
    remaining: int
    status: int | None = None
    seconds: float | None = None
    message: str | None = None

    def error_text(self, default: str | None = None) -> str:
        """The ``error`` of an injected status answer: its message, else ``default``, else
        ``Injected fault: <status> <phrase>``."""
        if self.message:
            return self.message
        if default:
            return default
        assert self.status is not None
        return f"Injected fault: {self.status} {HTTPStatus(self.status).phrase}"


def _segments(path: str) -> list[str]:
    return [segment for segment in path.split("/") if segment]


def path_matches(pattern: str, path: str) -> bool:
    """Whether ``path`` matches ``pattern``, where ``*`` stands for one segment."""
    wanted, actual = _segments(pattern), _segments(path)
    return len(wanted) == len(actual) and all(
        w == "*" or w == a for w, a in zip(wanted, actual, strict=True)
    )


class FaultBook:
    """The active faults, oldest first."""

    __slots__ = ("_faults", "_next_id")

    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self._next_id = 1

    def add(self, request: FaultRequest) -> Fault:
        """Validate and activate a fault; ``ValueError`` says what is wrong."""
        if request.count < 1:
            raise ValueError("count must be >= 1")
        if not request.path.startswith("/"):
            raise ValueError("path must start with '/' (relative to /client_api/v2)")
        if request.kind in ("status", "status_after"):
            if request.status is None or not 400 <= request.status <= 599:
                raise ValueError(f"a {request.kind} fault needs status between 400 and 599")
        elif request.status is not None:
            raise ValueError("status is only for kinds 'status' and 'status_after'")
        if request.kind in ("delay", "delay_after"):
            if request.seconds is None or not request.seconds >= 0:
                raise ValueError(f"a {request.kind} fault needs seconds >= 0")
        elif request.seconds is not None:
            raise ValueError("seconds is only for kinds 'delay' and 'delay_after'")
        message = request.message
        if request.kind == "carrier_rejection" and not message:
            message = DEFAULT_CARRIER_MESSAGE
        fault = Fault(
            id=self._next_id,
            kind=request.kind,
            method=request.method.upper(),
            path=request.path,
            remaining=request.count,
            status=request.status,
            seconds=request.seconds,
            message=message,
        )
        self._next_id += 1
        self._faults.append(fault)
        return fault

    def active(self) -> list[Fault]:
        """The faults still waiting for requests."""
        return list(self._faults)

    def clear(self) -> None:
        """Remove every fault."""
        self._faults.clear()

    def take(self, method: str, path: str, *, carrier: bool = False) -> Fault | None:
        """Consume one hit of the oldest fault matching the request.

        ``carrier=False`` looks at transport faults (everything but carrier rejections);
        ``carrier=True`` only at carrier rejections.
        """
        for fault in self._faults:
            if (fault.kind == "carrier_rejection") != carrier:
                continue
            if fault.method not in ("*", method.upper()) or not path_matches(fault.path, path):
                continue
            fault.remaining -= 1
            if fault.remaining == 0:
                self._faults.remove(fault)
            return fault
        return None
