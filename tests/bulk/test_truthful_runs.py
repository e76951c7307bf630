"""Infrastructure time is real time, and exit codes tell the truth (issue 13, items 6 and 7)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from shipping_async.bulk.journal import JobState
from shipping_async.bulk.shipper import BulkShipper
from shipping_async.bulk.sqlite_journal import SQLiteJournal
from shipping_async.clock import ManualClock
from tests.bulk.fakes import FakeAPI
from tests.bulk.support import make_job
from tests.bulk.test_bulk_cli import EXAMPLE, references, run_cli


def test_bulk_at_a_high_sandbox_speed_finishes_every_job_with_no_lease_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # At speed 500 the API's 60 s window lasts 0.12 s and a 3 s lease, were it scaled
    # too, 6 ms: it would lapse at every wait. Leases are real seconds, so the run is the
    # run at speed 1. (Estimates, a protocol duration, last 900 sandbox s: 1.8 s here.)
    out = tmp_path / "results.jsonl"
    argv = ["--sandbox", "--sandbox-speed", "500", "--lease", "3", "--out", str(out)]
    argv += ["--progress", "plain"]
    assert run_cli(str(EXAMPLE), *argv) == 0
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(result["key"] for result in results) == sorted(references())
    assert {result["status"] for result in results} == {"done"}
    assert "claim went stale" not in caplog.text
    assert "claimed again" not in caplog.text


def test_jobs_left_unfinished_make_the_exit_code_non_zero_and_name_the_resume_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "batch.journal"
    source = tmp_path / "four.csv"
    source.write_text("".join(EXAMPLE.read_text().splitlines(keepends=True)[:5]))

    async def an_earlier_job_not_in_this_input() -> None:
        async with await SQLiteJournal.open(journal) as opened:
            await opened.add([make_job("EARLIER-1")])

    asyncio.run(an_earlier_job_not_in_this_input())
    code = run_cli(str(source), "--sandbox", "--journal", str(journal), "--resume")
    printed = capsys.readouterr().out
    assert code == 1
    assert "1 shipment(s) not finished; to continue: shipping-async bulk" in printed
    assert f"--journal {journal} --resume" in printed


async def test_a_job_held_by_another_live_claim_is_reported_unfinished_not_done() -> None:
    clock = ManualClock()
    api = FakeAPI(clock)
    async with await SQLiteJournal.open(":memory:", clock=clock) as journal:
        await journal.add([make_job("HELD"), make_job("FREE")])
        await journal.claim("another-worker", lease=600, limit=1, keys=["HELD"])
        shipper = BulkShipper(api, journal=journal)
        results = [r async for r in shipper.run([make_job("HELD"), make_job("FREE")])]
        assert [r.key for r in results] == ["FREE"]
        assert set(shipper.unfinished) == {"HELD"}
        held = await journal.get("HELD")
        assert held is not None
        assert held.state is JobState.PENDING
        assert api.created == {"FREE": 1}
