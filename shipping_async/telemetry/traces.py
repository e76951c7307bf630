"""OpenTelemetry spans for API calls (extra ``[otel]``): ``ClientTracing`` subscribes to the hooks.

>>> client = AsyncShippingClient(hooks=[ClientTracing()])  # doctest: +SKIP

One span per call, named ``<METHOD> <route template>`` (``GET /orders/{id}``), kind
CLIENT, child of the current span (a job stage's, see
:func:`~shipping_async.telemetry.job_stage`). Attributes: ``http.request.method``,
``url.template``, ``http.response.status_code``, ``shipping_async.operation``,
``shipping_async.retries``, ``shipping_async.account``, and ``error.type`` on failure.
Never the token, the host, a body or an address; a failed call's status description is
its error class, not its text. Without a configured tracer provider (OpenTelemetry's
default) the spans cost next to nothing and go nowhere.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider

from shipping_async._hooks import APICall, ClientHooks
from shipping_async._version import __version__
from shipping_async.telemetry._scope import current_job

__all__ = ["ClientTracing"]


class ClientTracing(ClientHooks):
    """Client hooks that make one OpenTelemetry span per API call.

    ``tracer_provider`` defaults to the global one (set by the application, or by
    ``opentelemetry-instrument``); ``account`` is recorded on every span (``None``: the
    account of the job stage making the call).
    """

    __slots__ = ("_account", "_tracer")

    def __init__(self, *, account: str = "", tracer_provider: TracerProvider | None = None) -> None:
        self._tracer: Tracer = trace.get_tracer(
            "shipping_async", __version__, tracer_provider=tracer_provider
        )
        self._account = account

    def on_call_start(self, call: APICall) -> None:
        account = self._account
        if account is None:
            job = current_job()
            account = job.account if job is not None else ""
        call.state[self] = self._tracer.start_span(
            f"{call.method} {call.route}",
            kind=SpanKind.CLIENT,
            attributes={
                "http.request.method": call.method,
                "url.template": call.route,
                "shipping_async.operation": call.operation,
                "shipping_async.account": account,
            },
        )

    def on_call_end(self, call: APICall, error: BaseException | None) -> None:
        span = call.state.pop(self, None)
        if not isinstance(span, Span):
            return
        if call.status is not None:
            span.set_attribute("http.response.status_code", call.status)
        span.set_attribute("shipping_async.retries", call.retries)
        if error is not None:
            kind = type(error).__name__
            span.set_attribute("error.type", kind)
            span.set_status(Status(StatusCode.ERROR, kind))
        span.end()
