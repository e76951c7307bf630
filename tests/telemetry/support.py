"""A hook that writes down every event, for the telemetry tests."""

from __future__ import annotations

from typing import Any

from shipping_async import APICall, ClientHooks


class Recorder(ClientHooks):
    """Every hook call as a tuple: the hook's name without ``on_``, then what it saw."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def names(self) -> list[str]:
        return [event[0] for event in self.events]

    def on_call_start(self, call: APICall) -> None:
        self.events.append(("call_start", call.operation, call.method, call.route))

    def on_call_end(self, call: APICall, error: BaseException | None) -> None:
        self.events.append(("call_end", call.status, call.retries, type(error).__name__))

    def on_request(self, call: APICall) -> None:
        self.events.append(("request", call.attempts))

    def on_response(self, call: APICall, seconds: float) -> None:
        assert seconds >= 0
        self.events.append(("response", call.status, call.error))

    def on_retry(self, call: APICall, reason: str) -> None:
        self.events.append(("retry", reason))

    def on_rate_limited(self, call: APICall, error: Any) -> None:
        self.events.append(("rate_limited", error.limit, error.window))

    def on_outcome_unknown(self, call: APICall, error: Any) -> None:
        self.events.append(("outcome_unknown", call.operation))

    def on_permit_waiting(self, call: APICall) -> None:
        self.events.append(("permit_waiting",))

    def on_permit_granted(self, call: APICall, waited: float | None) -> None:
        self.events.append(("permit_granted", waited is not None))

    def on_permit_released(self, call: APICall) -> None:
        self.events.append(("permit_released",))

    def on_paused(self, call: APICall, seconds: float) -> None:
        self.events.append(("paused", seconds > 0))
