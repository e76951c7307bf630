"""The job stage a task is working on: a span (when OpenTelemetry is there) and log fields."""

from __future__ import annotations

import functools
import os
import sys
from contextvars import ContextVar, Token
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple

from shipping_async._version import __version__

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

__all__ = ["PROVIDER_ENV", "JobScope", "current_job", "job_stage", "provider_possible"]


class JobScope(NamedTuple):
    """The job and stage being worked on; ``account`` is ``""`` for the default account."""

    key: str
    account: str
    stage: str


_CURRENT: ContextVar[JobScope | None] = ContextVar("shipping_async_job", default=None)


@functools.cache
def _trace() -> ModuleType | None:
    """OpenTelemetry's trace API, imported on first use (it costs ~0.1 s to import), or
    ``None`` when the ``[otel]`` extra is not installed: stages are then only marked for
    the logs. Its provider is asked for once here, so that one named by the environment
    (``OTEL_PYTHON_TRACER_PROVIDER``) is installed from then on."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    trace.get_tracer_provider()
    return trace


@functools.cache
def _tracer() -> Tracer | None:
    """OpenTelemetry's tracer: a proxy until the application installs a tracer provider,
    then that provider's tracer; without one every span is a no-op (OpenTelemetry's own
    rule). ``None`` without the ``[otel]`` extra."""
    trace = _trace()
    return None if trace is None else trace.get_tracer("shipping_async", __version__)


#: Once a tracer provider is installed it stays (OpenTelemetry sets it once per process).
_INSTALLED: list[bool] = [False]
_UNSEEN = object()
#: The variable that names a tracer provider for OpenTelemetry's API to load on first use.
PROVIDER_ENV = "OTEL_PYTHON_TRACER_PROVIDER"


def provider_possible() -> bool:
    """Whether a tracer provider can be installed now: OpenTelemetry's trace API is loaded
    (whoever installs a provider loads it first: ``opentelemetry-instrument``, the
    application) or the environment names a provider for it to load. Otherwise the API
    is not imported at all (~10 ms of start-up): every span would be a no-op."""
    return "opentelemetry.trace" in sys.modules or _provider_named()


@functools.cache
def _provider_named() -> bool:
    """Whether the environment names a tracer provider: read once (``os.environ`` costs
    about a microsecond a look, and this is asked at every stage of every job), as the
    API itself loads that provider once, on first use."""
    return PROVIDER_ENV in os.environ


def _recording_tracer() -> Tracer | None:
    """The tracer, or ``None`` while no tracer provider is installed: every span would be
    OpenTelemetry's no-op one, so none is made. Asked at each stage, so a provider
    installed later is used from then on.

    The API's ``get_tracer_provider()`` looks ``os.environ`` up on every call until a
    provider is installed (a few microseconds, at every stage of every job); its module's
    global says the same at once, and the public call is the fallback of an API that
    keeps it elsewhere."""
    if _INSTALLED[0]:
        return _tracer()
    if not provider_possible():
        return None
    trace = _trace()
    if trace is None:
        return None
    provider = getattr(trace, "_TRACER_PROVIDER", _UNSEEN)
    if provider is _UNSEEN:
        provider = trace.get_tracer_provider()
    if provider is None or isinstance(provider, trace.ProxyTracerProvider):
        return None
    _INSTALLED[0] = True
    return _tracer()


def current_job() -> JobScope | None:
    """The job stage the running task is in, or ``None``."""
    return _CURRENT.get()


class job_stage:  # named as the function it replaces: ``with job_stage(...)``
    """Mark one stage (``quote``, ``order``, ``waybill``, ``pickup``) of one job.

    The API calls made inside become children of the stage's span
    ``shipping_async.job.<stage>`` (attributes: the job key, account and stage; no
    address, no token), and log records written inside carry the job key and account.
    A class rather than a generator: it is entered at every stage of every job.
    """

    __slots__ = ("_reset", "_scope", "_span")
    _reset: Token[JobScope | None]  # set by __enter__

    def __init__(self, stage: str, key: str, account: str) -> None:
        self._scope = JobScope(key, account, stage)
        self._span: Any = None

    def __enter__(self) -> None:
        self._reset = _CURRENT.set(self._scope)
        if _INSTALLED[0] or provider_possible():  # else no span could record: none is made
            try:
                self._open_span()
            except BaseException:
                _CURRENT.reset(self._reset)
                raise

    def _open_span(self) -> None:
        tracer = _recording_tracer()
        if tracer is not None:
            scope = self._scope
            attributes = {
                "shipping_async.job.key": scope.key,
                "shipping_async.job.stage": scope.stage,
                "shipping_async.account": scope.account,
            }
            span = tracer.start_as_current_span(
                f"shipping_async.job.{scope.stage}", attributes=attributes
            )
            span.__enter__()
            self._span = span

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span = self._span
        if span is None:
            _CURRENT.reset(self._reset)
            return
        try:
            span.__exit__(exc_type, exc, tb)
        finally:
            _CURRENT.reset(self._reset)
