"""The bulk progress bar: the bar, rate and ETA on one line, the stage counts on the next."""

from __future__ import annotations

from rich.console import Console

from shipping_async.bulk.journal import JobState
from shipping_async.bulk.shipper import RunProgress
from shipping_async.cli._bulk_progress import RichDisplay, _Rates


def test_the_bar_keeps_the_eta_on_an_80_column_terminal_with_counts_below() -> None:
    progress = RunProgress()
    progress.states[JobState.QUOTED] = 40
    progress.reached[JobState.ORDERED] = 20
    progress.reached[JobState.DONE] = 20
    display = RichDisplay(_Rates(progress, limit=20, window_real=60.0))
    display.start(60)
    display.tick()
    display.stop()

    console = Console(width=80, record=True, color_system=None)
    for renderable in display._progress.get_renderables():
        console.print(renderable)
    bar_line, *count_lines = console.export_text().rstrip("\n").splitlines()
    counts = " ".join(line.strip() for line in count_lines)

    assert bar_line.startswith("shipping")
    assert bar_line.rstrip().endswith("ETA 2:00")  # 40 orders left: two more windows
    assert "…" not in bar_line
    assert counts.startswith("quoting 40 · ordering 0")
    assert "done 20" in counts
    assert counts.endswith("resumed 0")
