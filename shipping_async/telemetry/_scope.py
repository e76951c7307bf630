"""The job stage a task is working on: a span (when OpenTelemetry is there) and log fields."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shipping_async._version import __version__

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

__all__ = ["JobScope", "current_job", "job_stage"]


@dataclass(frozen=True, slots=True)
class JobScope:
    """The job and stage being worked on; ``account`` is ``""`` for the default account."""

    key: str
    account: str
    stage: str


_CURRENT: ContextVar[JobScope | None] = ContextVar("shipping_async_job", default=None)


@functools.cache
def _tracer() -> Tracer | None:
    """OpenTelemetry's tracer, imported on first use (it costs ~0.1 s to import).

    A proxy until the application installs a tracer provider, then that provider's
    tracer; without one every span is a no-op (OpenTelemetry's own rule). ``None`` when
    the ``[otel]`` extra is not installed: stages are then only marked for the logs.
    """
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace.get_tracer("shipping_async", __version__)


def _recording_tracer() -> Tracer | None:
    """The tracer, or ``None`` while no tracer provider is installed: every span would be
    OpenTelemetry's no-op one, so none is made (about 10 us per stage saved). Asked at
    each stage, so a provider installed later is used from then on."""
    tracer = _tracer()
    if tracer is None:
        return None
    from opentelemetry import trace  # imported by _tracer() already

    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return None
    return tracer


def current_job() -> JobScope | None:
    """The job stage the running task is in, or ``None``."""
    return _CURRENT.get()


@contextmanager
def job_stage(stage: str, key: str, account: str) -> Iterator[None]:
    """Mark one stage (``quote``, ``order``, ``waybill``, ``pickup``) of one job.

    The API calls made inside become children of the stage's span
    ``shipping_async.job.<stage>`` (attributes: the job key, account and stage; no
    address, no token), and log records written inside carry the job key and account.
    """
    reset = _CURRENT.set(JobScope(key, account, stage))
    try:
        tracer = _recording_tracer()
        if tracer is None:
            yield
        else:
            attributes = {
                "shipping_async.job.key": key,
                "shipping_async.job.stage": stage,
                "shipping_async.account": account,
            }
            with tracer.start_as_current_span(f"shipping_async.job.{stage}", attributes=attributes):
                yield
    finally:
        _CURRENT.reset(reset)
