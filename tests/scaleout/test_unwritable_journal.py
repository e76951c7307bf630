"""A SQLite journal that can no longer be written stops the run cleanly (issue 12).

A real ``bulk`` process against a sandbox process, its journal on a small tmpfs that is
filled up mid-batch (once orders are going out). Where mounting is not permitted, the
same run with the process's file size capped by ``RLIMIT_FSIZE`` (what a full disk does
to its writes, no privileges needed; the cap is reached before the first order). The
run must say so in one line, send nothing without a durable intent, leave a consistent
journal and tell how to resume; the resumed run finishes the batch, each shipment
ordered once.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import os
import resource
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from shipping_async.bulk.journal import JobState
from shipping_async.bulk.sqlite_journal import SQLiteJournal

from .processes import SPEED, Sandbox, cli, created, start_sandbox
from .support import make_job

#: Bytes the journal may grow to under RLIMIT_FSIZE: its first writes fit (creating the
#: schema writes about 70 kB of WAL frames), the batch does not.
CAP = 80_000
BEFORE_THE_INTENT = {JobState.PENDING, JobState.QUOTED}


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    server = start_sandbox("tok-sqlite")
    yield server
    server.stop()


def capped(limit: int) -> None:  # runs in the child before exec
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the cap fails (EFBIG)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def bulk_argv(sandbox: Sandbox, journal: Path, folder: Path, *extra: str) -> list[str]:
    return cli(
        "bulk", str(folder / "in.jsonl"), "--journal", str(journal),
        "--base-url", sandbox.base_url, "--sandbox-speed", str(SPEED),
        "--estimate-validity", "600", "--progress", "plain", *extra,
    )  # fmt: skip


def bulk(
    sandbox: Sandbox, journal: Path, folder: Path, *extra: str, cap: int | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        bulk_argv(sandbox, journal, folder, *extra),
        env={**os.environ, "SHIPPING_ACCESS_TOKEN": sandbox.token},
        preexec_fn=None if cap is None else (lambda: capped(cap)),
        capture_output=True,
        text=True,
        timeout=60,
    )


@contextlib.contextmanager
def small_tmpfs(folder: Path) -> Iterator[Path | None]:
    """A 4 MB tmpfs at ``folder``, or ``None`` where mounting is not permitted."""
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        yield None
        return
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> Path:
    """Take every free byte of ``folder``'s filesystem; the filler file."""
    filler = folder / "filler"
    with contextlib.suppress(OSError), filler.open("wb", buffering=0) as out:
        while True:
            out.write(b"\0" * 65536)
    return filler


async def first_run(sandbox: Sandbox, tmp_path: Path, disk: Path | None) -> tuple[str, str]:
    """The run that finds its journal unwritable; its stdout and stderr."""
    if disk is None:
        run = bulk(sandbox, tmp_path / "batch.journal", tmp_path, cap=CAP)
        assert run.returncode == 1, run.stdout + run.stderr
        return run.stdout, run.stderr
    with (tmp_path / "first.out").open("w") as out, (tmp_path / "first.err").open("w") as err:
        process = subprocess.Popen(  # noqa: ASYNC220 - it runs while the test fills the disk
            bulk_argv(sandbox, disk / "batch.journal", tmp_path),
            env={**os.environ, "SHIPPING_ACCESS_TOKEN": sandbox.token},
            stdout=out,
            stderr=err,
            text=True,
        )
        try:
            await sandbox.wait_for_orders(10)  # mid-batch
            filler = await asyncio.to_thread(fill, disk)
            code = await asyncio.to_thread(process.wait, 30)
        finally:
            if process.poll() is None:
                process.kill()
    filler.unlink()  # room again
    assert code == 1, (tmp_path / "first.out").read_text() + (tmp_path / "first.err").read_text()
    return (tmp_path / "first.out").read_text(), (tmp_path / "first.err").read_text()


@pytest.mark.parametrize(
    "full", [pytest.param(True, id="full-tmpfs"), pytest.param(False, id="rlimit")]
)
async def test_an_unwritable_sqlite_journal_stops_cleanly_and_resume_finishes(
    sandbox: Sandbox, tmp_path: Path, full: bool
) -> None:
    keys = [f"SQ-{index:03d}" for index in range(60)]
    (tmp_path / "in.jsonl").write_bytes(
        b"".join(msgspec.json.encode(make_job(key)) + b"\n" for key in keys)
    )
    with small_tmpfs(tmp_path / "disk") as disk:
        if full and disk is None:
            pytest.skip("mount not permitted here; the rlimit case covers a full disk")
        if not full:
            disk = None
        journal = (disk or tmp_path) / "batch.journal"
        out, err = await first_run(sandbox, tmp_path, disk)
        assert "Traceback" not in err, err
        assert "the journal file cannot be written" in err, err
        resume = next(line for line in out.splitlines() if "to continue: " in line)
        assert f"--journal {journal} " in resume, out
        assert resume.endswith(" --resume"), out

        # Consistent: it opens, and no order left without a durable intent before it.
        sent = created(await sandbox.orders())
        assert sent or not full, "the disk filled before any order"
        async with await SQLiteJournal.open(journal) as opened:
            records = {record.key: record async for record in opened.records()}
            unknown = await opened.needs_reconciliation()
        assert not [key for key in sent if records[key].state in BEFORE_THE_INTENT]

        # Orders on the wire when the disk filled are unknown: reconciled from the log.
        settle = tmp_path / "settle.csv"
        with settle.open("w", newline="") as settled:
            rows = csv.writer(settled)
            rows.writerow(["key", "order_id"])
            orders = await sandbox.orders()
            for record in unknown:
                found = [o["order_id"] for o in orders if o["customer_reference"] == record.key]
                rows.writerow([record.key, next((i for i in found if i), "none")])
        second = bulk(sandbox, journal, tmp_path, "--resume", "--reconcile", str(settle))
        assert second.returncode == 0, second.stdout + second.stderr
    assert created(await sandbox.orders()) == dict.fromkeys(keys, 1)
