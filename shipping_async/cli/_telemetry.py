"""What ``bulk`` and ``worker`` add for operators: /metrics, client spans, JSON log lines.

One :class:`RunTelemetry` per run, made from the command line: ``hooks`` go to every
client (metrics labelled by the account of the job making the call, spans when the
OpenTelemetry API is installed), :meth:`RunTelemetry.serving` serves ``/metrics`` for the
run (and ``--metrics-linger`` seconds after it) and :meth:`RunTelemetry.watching` keeps
the job gauges in step with the journal.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import logging
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from shipping_async._hooks import ClientHooks
from shipping_async._http import _HANDLER_NAME as ENV_HANDLER_NAME
from shipping_async._http import LOGGER_NAME
from shipping_async.telemetry._scope import provider_possible
from shipping_async.telemetry.logs import formatter

if TYPE_CHECKING:
    from shipping_async.telemetry.metrics import Metrics

__all__ = ["RunTelemetry", "add_telemetry_options", "configure_cli_logging"]

_LOOPBACK = "127.0.0.1"


def add_telemetry_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--metrics-port``, ``--metrics-host`` and ``--metrics-linger``."""
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics (0: a free port, "
        "printed on stderr); needs the [metrics] extra",
    )
    parser.add_argument(
        "--metrics-host",
        default=_LOOPBACK,
        metavar="HOST",
        help=f"address /metrics listens on ({_LOOPBACK}; 0.0.0.0 for a scraper elsewhere)",
    )
    parser.add_argument(
        "--metrics-linger",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="keep /metrics up this long after the run, for a last scrape (0)",
    )


def configure_cli_logging() -> None:
    """Warnings and errors to stderr, as JSON lines with ``SHIPPING_LOG_FORMAT=json``."""
    handler = logging.StreamHandler()
    handler.setFormatter(formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_not_written_by_shipping_log)
    logging.basicConfig(level=logging.WARNING, handlers=[handler])


def _not_written_by_shipping_log(record: logging.LogRecord) -> bool:
    """Whether a record still needs writing: with ``SHIPPING_LOG`` set, the SDK's own
    stderr handler already wrote the library's records (each line once, not twice)."""
    if record.name != LOGGER_NAME and not record.name.startswith(LOGGER_NAME + "."):
        return True
    library = logging.getLogger(LOGGER_NAME)
    return not any(handler.get_name() == ENV_HANDLER_NAME for handler in library.handlers)


def _tracer_provider_installed() -> bool:
    """Whether spans would go anywhere: the OpenTelemetry API is there and a tracer
    provider is installed (``opentelemetry-instrument`` installs one before the CLI
    starts, or the environment names one). Without one every span is a no-op: the run
    does not make them at all, nor imports the API."""
    if not provider_possible() or importlib.util.find_spec("opentelemetry") is None:
        return False
    from opentelemetry import trace

    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


class RunTelemetry:
    """The metrics and spans of one CLI run (see the module docstring)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._port: int | None = args.metrics_port
        self._host: str = args.metrics_host
        self._linger: float = args.metrics_linger
        if self._port is not None and not 0 <= self._port <= 65535:
            raise ValueError(f"--metrics-port: expected 0-65535, got {self._port}")
        if not 0 <= self._linger < 86400:
            raise ValueError(f"--metrics-linger: expected seconds >= 0, got {self._linger:g}")
        self._metrics: Metrics | None = None
        if self._port is not None:
            try:
                from shipping_async.telemetry.metrics import Metrics
            except ImportError:
                raise ValueError(
                    "--metrics-port needs prometheus-client: pip install 'shipping-async[metrics]'"
                ) from None
            self._metrics = Metrics()
        hooks: list[ClientHooks] = []
        if self._metrics is not None:
            hooks.append(self._metrics.client_hooks())
        if _tracer_provider_installed():
            from shipping_async.telemetry.traces import ClientTracing

            hooks.append(ClientTracing())
        #: What every client of the run gets as ``hooks=``.
        self.hooks: tuple[ClientHooks, ...] = tuple(hooks)

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Serve ``/metrics`` (with ``--metrics-port``) until ``--metrics-linger`` after."""
        if self._metrics is None:
            yield
            return
        try:
            server = self._metrics.serve(port=self._port or 0, host=self._host)
        except OSError as exc:
            raise ValueError(f"--metrics-port {self._port}: {exc.strerror or exc}") from None
        host = f"[{server.host}]" if ":" in server.host else server.host
        print(f"metrics: http://{host}:{server.port}/metrics", file=sys.stderr, flush=True)
        try:
            yield
            if self._linger > 0:
                print(
                    f"metrics: the run is over; serving the final counts for "
                    f"{self._linger:g} s (Ctrl-C ends this)",
                    file=sys.stderr,
                    flush=True,
                )
                await asyncio.sleep(self._linger)  # real seconds: for a real scraper
        finally:
            server.close()

    @contextlib.asynccontextmanager
    async def watching(self, journal: Any) -> AsyncIterator[None]:
        """Keep the job gauges in step with ``journal`` while the run uses it."""
        if self._metrics is None:
            yield
            return
        async with self._metrics.watch_journal(journal):
            yield
