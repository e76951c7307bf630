"""A run killed between its intent's commit and the request: told apart by the sent marks.

A copy of the journal's files (database, WAL and ``-sent``) taken while the journal is
open is what a SIGKILL at that moment leaves; opening the copy settles the dead run as a
resumed run does.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from shipping_async.bulk import _sent_marks, sqlite_journal
from shipping_async.bulk.journal import JobState
from shipping_async.bulk.sqlite_journal import SQLiteJournal
from tests.bulk.support import make_job

KEY = "M-1"


async def _killed_at_intent(tmp_path: Path, *, marks: bool = True) -> Path:
    """The files a SIGKILL would leave right after an order intent's request started, at
    a copy whose path is returned; ``marks=False``: the process died after the intent's
    commit and before its mark was written (so before its request's first byte)."""
    path, copy = tmp_path / "a.journal", tmp_path / "b.journal"
    journal = await SQLiteJournal.open(path)
    try:
        await journal.add([make_job(KEY)])
        [record] = await journal.claim("host:1:w", lease=600, limit=1, keys=[KEY])
        token = record.claim_token or ""
        await journal.record(token, KEY, JobState.QUOTED, quote_id=1, estimate_id=2)
        await journal.begin_order(token, KEY, quote_id=1, estimate_id=2)
        if marks:
            journal.sending(KEY)
        for suffix in ("", "-wal", "-sent"):
            source = Path(f"{path}{suffix}")
            if await asyncio.to_thread(source.exists):
                await asyncio.to_thread(shutil.copyfile, source, f"{copy}{suffix}")
    finally:
        await journal.close()
    return copy


async def _state_on_resume(copy: Path) -> JobState:
    async with await SQLiteJournal.open(copy) as journal:
        record = await journal.get(KEY)
    assert record is not None
    return record.state


@pytest.fixture(autouse=True)
def _a_boot_id(monkeypatch: pytest.MonkeyPatch) -> None:
    # Machines without /proc boot ids conclude nothing; these tests need one.
    monkeypatch.setattr(sqlite_journal, "boot_id", lambda: "boot-1")


async def test_an_intent_whose_request_was_never_written_is_quoted_again_on_resume(
    tmp_path: Path,
) -> None:
    copy = await _killed_at_intent(tmp_path, marks=False)

    assert await _state_on_resume(copy) is JobState.QUOTED


async def test_an_intent_marked_sent_stays_unknown(tmp_path: Path) -> None:
    copy = await _killed_at_intent(tmp_path)

    assert await _state_on_resume(copy) is JobState.UNKNOWN


async def test_after_a_reboot_no_intent_is_concluded_never_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A power cut can lose marks the page cache held: on another boot nothing is concluded.
    copy = await _killed_at_intent(tmp_path, marks=False)
    monkeypatch.setattr(sqlite_journal, "boot_id", lambda: "boot-2")

    assert await _state_on_resume(copy) is JobState.UNKNOWN


async def test_marks_of_another_run_than_the_journals_last_conclude_nothing(
    tmp_path: Path,
) -> None:
    # A journal restored from a backup beside a newer run's marks file.
    copy = await _killed_at_intent(tmp_path, marks=False)
    header = _sent_marks.previous_marks(f"{copy}-sent")
    assert header is not None
    other = _sent_marks.SentMarks(f"{copy}-sent", run="other", boot="boot-1")
    other.close()

    assert await _state_on_resume(copy) is JobState.UNKNOWN


async def test_a_torn_last_mark_is_no_mark(tmp_path: Path) -> None:
    copy = await _killed_at_intent(tmp_path)
    marks = Path(f"{copy}-sent")
    data = await asyncio.to_thread(marks.read_bytes)
    await asyncio.to_thread(marks.write_bytes, data[:-5])  # the kill fell inside the write

    assert await _state_on_resume(copy) is JobState.QUOTED


def test_a_long_run_keeps_only_the_marks_of_intents_still_open(tmp_path: Path) -> None:
    # A worker running for weeks: past its size the file is rewritten with the marks
    # that can still matter, those of intents not yet answered.
    path = str(tmp_path / "w.journal-sent")
    marks = _sent_marks.SentMarks(path, run="r1", boot="boot-1", max_bytes=200)
    try:
        for index in range(20):
            marks.note(f"K-{index}", f"stamp-{index}")
            if index % 5:
                marks.answered(f"K-{index}")
    finally:
        marks.close()

    found = _sent_marks.previous_marks(path)
    assert found is not None
    assert (found.run, found.boot) == ("r1", "boot-1")
    still_open = {(f"K-{i}", f"stamp-{i}") for i in range(0, 20, 5)}
    assert still_open <= found.marks  # every open intent keeps its mark
    assert len(found.marks) < 20  # answered ones were dropped at the rewrite
    assert Path(path).stat().st_size <= 200 + 30  # one line past the limit at most
