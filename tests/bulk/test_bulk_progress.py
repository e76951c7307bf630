"""The bulk progress: the bar (rate and ETA on one line, stage counts on the next); plain lines."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from shipping_async.bulk.journal import JobState
from shipping_async.bulk.results import ResultStatus, ShipmentResult, Stage
from shipping_async.bulk.shipper import RunProgress
from shipping_async.cli._bulk_progress import PlainDisplay, RichDisplay, _Rates
from shipping_async.cli._terminal import printable


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


class _Recording(io.StringIO):
    """A stream that keeps what had reached it at each flush."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed: list[str] = []

    def flush(self) -> None:
        self.flushed.append(self.getvalue())


def test_plain_lines_are_escaped_and_flushed_at_the_next_tick_not_one_by_one() -> None:
    stream = _Recording()
    display = PlainDisplay(_Rates(RunProgress(), limit=20, window_real=60.0), stream)
    display.start(2)
    started = len(stream.flushed)
    display.result(ShipmentResult(key="A-1", status=ResultStatus.DONE, stage=Stage.PICKUP))
    display.result(
        ShipmentResult(
            key="A-2\x1b[2J",
            status=ResultStatus.FAILED,
            stage=Stage.QUOTE,
            error="bad\nline",
        )
    )
    assert len(stream.flushed) == started  # written, not yet flushed
    display.tick()
    assert len(stream.flushed) == started + 2  # the lines, then the first counts line
    lines = stream.flushed[started].splitlines()
    assert lines[-2] == "done A-1 stage=pickup"
    assert lines[-1] == "failed A-2\\x1b[2J stage=quote retryable=no error=bad\\nline"
    display.result(ShipmentResult(key="A-3", status=ResultStatus.DONE, stage=Stage.PICKUP))
    display.stop()
    assert stream.flushed[-1].endswith("done A-3 stage=pickup\n")


class _WriteThrough(io.StringIO):
    """A stream whose every write reaches the file at once (PYTHONUNBUFFERED, -u)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


def test_plain_lines_of_many_jobs_are_one_write_even_on_a_write_through_stream() -> None:
    stream = _WriteThrough()
    display = PlainDisplay(_Rates(RunProgress(), limit=20, window_real=60.0), stream)
    display.start(3)
    started = len(stream.writes)
    for key in ("A-1", "A-2", "A-3"):
        display.result(ShipmentResult(key=key, status=ResultStatus.DONE, stage=Stage.PICKUP))
    assert len(stream.writes) == started  # held until the tick
    display.message("stopping")  # a message comes after the lines held
    assert stream.writes[started:] == [
        "done A-1 stage=pickup\ndone A-2 stage=pickup\ndone A-3 stage=pickup\nstopping\n"
    ]


# Every character printable() escapes: C0 and C1 controls, DEL, the bidirectional overrides.
_ESCAPED = [
    *map(chr, range(0x00, 0x20)),
    *map(chr, range(0x7F, 0xA0)),
    *map(chr, range(0x202A, 0x202F)),
    *map(chr, range(0x2066, 0x206A)),
]


def test_every_character_printable_escapes_is_one_python_calls_unprintable() -> None:
    """printable() returns text as it is when str.isprintable() says so: that is safe
    only while every character it escapes is one isprintable() refuses."""
    assert all(not character.isprintable() for character in _ESCAPED)


@given(
    st.text(
        alphabet=st.sampled_from([*_ESCAPED, "a", "é", " ", "\u2028", "\u200b"]) | st.characters()
    )
)
def test_printable_escapes_exactly_the_unsafe_characters(text: str) -> None:
    expected = "".join(
        character.encode("unicode_escape").decode("ascii") if character in _ESCAPED else character
        for character in text
    )
    assert printable(text) == expected
