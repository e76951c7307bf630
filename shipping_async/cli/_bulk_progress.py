"""Progress of ``shipping-async bulk``: a rich bar on a terminal, else one line per event."""

from __future__ import annotations

import math
import sys
import time
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol, TextIO

from shipping_async.bulk.journal import JobState
from shipping_async.bulk.results import ResultStatus, ShipmentResult
from shipping_async.cli._terminal import printable, rich_text

if TYPE_CHECKING:
    from rich.progress import TaskID

    from shipping_async.bulk.shipper import RunProgress

__all__ = ["Display", "PlainDisplay", "RichDisplay", "make_display"]


class Display(Protocol):
    """What the command tells the user while a batch runs."""

    def start(self, total: int) -> None: ...
    def result(self, result: ShipmentResult) -> None: ...
    def tick(self) -> None: ...
    def message(self, text: str) -> None: ...
    def stop(self) -> None: ...


class _Rates:
    """Orders per minute (real time) and the ETA the rate limit allows."""

    def __init__(self, progress: RunProgress, limit: int, window_real: float) -> None:
        self._progress = progress
        self._limit = limit
        self._window = window_real
        self._samples: deque[tuple[float, int]] = deque(maxlen=64)
        self.total = 0

    def orders_per_minute(self) -> float:
        # Wall time for display only; protocol durations never use it.
        now = time.monotonic()
        self._samples.append((now, self._progress.reached[JobState.ORDERED]))
        first_at, first = self._samples[0]
        span = max(now - first_at, self._window)
        return (self._samples[-1][1] - first) * 60.0 / span

    def eta(self) -> float:
        """Seconds until the last order can be sent, at ``limit`` per window."""
        progress = self._progress
        settled = progress.resumed + progress.invalid + progress.failed_unordered
        remaining = max(0, self.total - settled - progress.reached[JobState.ORDERED])
        return math.ceil(remaining / self._limit) * self._window if remaining else 0.0

    def counts(self) -> str:
        states = self._progress.states
        quoted = states[JobState.PENDING] + states[JobState.QUOTED]
        return (
            f"quoting {quoted} · ordering {states[JobState.ORDERING]} · "
            f"waybill {states[JobState.ORDERED]} · pickup {states[JobState.WAYBILLED]} · "
            f"done {self._progress.reached[JobState.DONE]} · "
            f"failed {self._progress.reached[JobState.FAILED] + self._progress.invalid} · "
            f"unknown {self._progress.reached[JobState.UNKNOWN]} · "
            f"resumed {self._progress.resumed}"
        )


class PlainDisplay:
    """One line per finished shipment, and a counts line now and then.

    A shipment's line is written with the next tick (four times a second), not at once:
    one write for the lines of many jobs, not a system call per job, also when the
    stream itself writes through at once (``PYTHONUNBUFFERED``, ``python -u``). Other
    messages are written, after the lines held, as they come.
    """

    def __init__(self, rates: _Rates, stream: TextIO) -> None:
        self._rates = rates
        self._stream = stream
        self._last = 0.0
        self._held: list[str] = []  # shipments' lines, each ending in a newline

    def start(self, total: int) -> None:
        self._rates.total = total
        self.message(f"{total} shipments")

    def result(self, result: ShipmentResult) -> None:
        # The statuses and stages are StrEnums: str already (``.value`` is a property call).
        parts = [result.status, result.key, f"stage={result.stage}"]
        if result.order_id is not None:
            parts.append(f"order={result.order_id}")
        if result.waybills:
            parts.append("waybills=" + ",".join(w or "-" for w in result.waybills))
        if result.pickup_confirmation:
            parts.append(f"pickup={result.pickup_confirmation}")
        if result.cost is not None:
            parts.append(f"cost={result.cost} {result.currency}")
        if result.resumed:
            parts.append("(earlier run)")
        if result.status is not ResultStatus.DONE and result.error:
            parts.append(f"retryable={'yes' if result.retryable else 'no'} error={result.error}")
        # Keys, error texts, waybills come from cells and answers: a whole line is escaped,
        # so none of them can move the cursor, clear the screen or forge a line.
        self._held.append(printable(" ".join(parts)) + "\n")

    def tick(self) -> None:
        self._write_held()
        now = time.monotonic()
        if now - self._last >= 5.0:
            self._last = now
            rates = self._rates
            self.message(
                f"progress: {rates.counts()} · {rates.orders_per_minute():.0f} orders/min · "
                f"ETA {rates.eta():.0f}s"
            )

    def message(self, text: str) -> None:
        # Escaped as a whole, like a shipment's line; after the lines held.
        self._held.append(printable(text) + "\n")
        self._write_held()

    def stop(self) -> None:
        self._write_held()

    def _write_held(self) -> None:
        if self._held:
            text = "".join(self._held)
            self._held.clear()
            self._stream.write(text)
            self._stream.flush()


class RichDisplay:
    """A bar over all shipments, orders per minute and the ETA; per-stage counts below it."""

    def __init__(self, rates: _Rates) -> None:
        from rich.console import RenderableType
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
        from rich.text import Text

        class _TwoLineProgress(Progress):
            # The counts get a line of their own: on one line with the bar they push the
            # ETA off an ordinary 80- or 120-column terminal.
            counts = ""

            def get_renderables(self) -> Iterable[RenderableType]:
                yield self.make_tasks_table(self.tasks)
                yield Text(self.counts, style="dim")

        self._rates = rates
        self._progress: _TwoLineProgress = _TwoLineProgress(
            TextColumn("[bold]shipping"),
            BarColumn(bar_width=30),
            MofNCompleteColumn(),
            TextColumn("· {task.fields[rate]} orders/min · ETA {task.fields[eta]}"),
            transient=False,
        )
        self._task: TaskID | None = None

    def start(self, total: int) -> None:
        self._rates.total = total
        self._progress.start()
        self._task = self._progress.add_task("ship", total=total, rate="0", eta="-")

    def result(self, result: ShipmentResult) -> None:
        if self._task is not None:
            self._progress.advance(self._task)
        if result.status is not ResultStatus.DONE and not result.resumed:
            # Keys and error texts come from cells and answers: never read as markup.
            self._progress.console.print(
                f"[yellow]{result.status.value}[/] {rich_text(result.key)} at "
                f"{result.stage.value}: {rich_text(result.error)}",
                markup=True,
                highlight=False,
            )

    def tick(self) -> None:
        if self._task is None:
            return
        rates = self._rates
        eta = rates.eta()
        self._progress.counts = rates.counts()
        self._progress.update(
            self._task,
            rate=f"{rates.orders_per_minute():.0f}",
            eta=f"{int(eta // 60)}:{int(eta % 60):02d}",
        )

    def message(self, text: str) -> None:
        self._progress.console.print(printable(text), markup=False, highlight=False)

    def stop(self) -> None:
        self.tick()
        self._progress.stop()


def make_display(mode: str, progress: RunProgress, *, limit: int, window_real: float) -> Display:
    """``bar`` (rich), ``plain`` (lines), or ``auto``: the bar on a terminal."""
    rates = _Rates(progress, limit, window_real)
    if mode == "bar" or (mode == "auto" and sys.stdout.isatty()):
        return RichDisplay(rates)
    return PlainDisplay(rates, sys.stdout)
