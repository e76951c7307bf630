"""The PostgreSQL journal's sent marks: a killed process's unsent intents are quoted again.

A child process claims jobs, commits order intents and marks some as sent (as the order's
request does right before its first byte), then is SIGKILLed or stopped. A later journal
of the same machine, claiming once the leases have lapsed, must send again exactly the
intents that surely never left, and leave every other one ``unknown``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from shipping_async.bulk.journal import JobState
from shipping_async.scaleout._pg_sent_marks import LocalMarks, journal_name, process_start
from shipping_async.scaleout.postgres_journal import PostgresJournal
from tests.bulk.support import make_jobs
from tests.pg_schemas import POSTGRES_DSN

pytestmark = pytest.mark.skipif(
    not Path("/proc/sys/kernel/random/boot_id").exists(), reason="needs Linux's boot id"
)

LEASE = 1.0  # real seconds: the child's claims lapse this long after it stops

CHILD = textwrap.dedent(
    """
    import asyncio, json, os, signal, sys
    from shipping_async.scaleout.postgres_journal import PostgresJournal
    from tests.bulk.support import make_jobs

    async def main(dsn, schema, marks, sent, unsent, ending):
        journal = await PostgresJournal.open(
            dsn, schema=schema, sent_marks=marks if marks != "-" else None
        )
        await journal.add(make_jobs(4))
        tokens = {
            r.key: r.claim_token
            for r in await journal.claim("child:worker", lease=float(os.environ["LEASE"]), limit=4)
        }
        for key in [*sent, *unsent]:
            await journal.begin_order(tokens[key], key, quote_id=1, estimate_id=2)
        for key in sent:
            journal.sending(key)  # the request's first byte would follow
        print("ready", flush=True)
        if ending == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        await asyncio.sleep(3600)  # stopped by the test

    dsn, schema, marks, sent, unsent, ending = sys.argv[1:]
    asyncio.run(main(dsn, schema, marks, json.loads(sent), json.loads(unsent), ending))
    """
)


def start_child(
    schema: str, marks: Path | None, sent: list[str], unsent: list[str], ending: str
) -> subprocess.Popen[str]:
    """The child, once it has committed its intents (and marked ``sent``)."""
    command = [sys.executable, "-c", CHILD, POSTGRES_DSN, schema, str(marks or "-")]
    command += [json.dumps(sent), json.dumps(unsent), ending]
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "LEASE": str(LEASE), "PYTHONPATH": str(root)}
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=root, env=env)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    return child


def files(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


async def states_after_a_claim(journal: PostgresJournal) -> dict[str, JobState]:
    """Every job's state after one claim by a worker of this process, leases lapsed."""
    await asyncio.sleep(LEASE + 0.3)
    await journal.claim("parent:worker", lease=60, limit=10)
    return {record.key: record.state async for record in journal.records()}


async def test_an_intent_a_killed_process_never_sent_is_quoted_again(
    pg_schema: str, tmp_path: Path
) -> None:
    child = start_child(pg_schema, tmp_path, ["PO-0000"], ["PO-0001"], "kill")
    assert child.wait(10) == -signal.SIGKILL
    journal = await PostgresJournal.open(POSTGRES_DSN, schema=pg_schema, sent_marks=tmp_path)
    try:
        states = await states_after_a_claim(journal)
        assert states["PO-0000"] is JobState.UNKNOWN  # marked: it may have been sent
        # Never sent: claimed again, to be ordered again (PO-0002/3 had no intent).
        assert states["PO-0001"] is JobState.QUOTED
        claimed = {r.key async for r in journal.records() if r.lease_owner == "parent:worker"}
        assert claimed == {"PO-0001", "PO-0002", "PO-0003"}
        # The gone process's file is deleted once none of its intents is open.
        await journal.claim("parent:worker", lease=60, limit=10)
        assert [name for name in files(tmp_path) if f"-{os.getpid()}-" not in name] == []
    finally:
        await journal.close()
    assert files(tmp_path) == []  # a journal that closes deletes its own


async def test_nothing_is_concluded_while_the_process_that_wrote_the_intent_runs(
    pg_schema: str, tmp_path: Path
) -> None:
    # Stopped, not dead: it may still send its intent when it wakes up.
    child = start_child(pg_schema, tmp_path, [], ["PO-0001"], "stop")
    child.send_signal(signal.SIGSTOP)
    try:
        journal = await PostgresJournal.open(POSTGRES_DSN, schema=pg_schema, sent_marks=tmp_path)
        try:
            assert (await states_after_a_claim(journal))["PO-0001"] is JobState.UNKNOWN
        finally:
            await journal.close()
    finally:
        child.kill()
        child.wait(10)


@pytest.mark.parametrize(
    ("child_keeps_marks", "parent_keeps_marks"),
    # A process that kept no marks here (as a worker of another machine), and a journal
    # opened without a marks directory.
    [(False, True), (True, False)],
    ids=["no-file-of-its-process", "no-marks-directory"],
)
async def test_a_killed_process_intent_is_left_unknown_when_the_marks_cannot_tell(
    pg_schema: str, tmp_path: Path, child_keeps_marks: bool, parent_keeps_marks: bool
) -> None:
    child = start_child(pg_schema, tmp_path if child_keeps_marks else None, [], ["PO-0001"], "kill")
    child.wait(10)
    journal = await PostgresJournal.open(
        POSTGRES_DSN, schema=pg_schema, sent_marks=tmp_path if parent_keeps_marks else None
    )
    try:
        assert (await states_after_a_claim(journal))["PO-0001"] is JobState.UNKNOWN
    finally:
        await journal.close()


async def test_sending_without_a_committed_intent_is_refused(
    pg_schema: str, tmp_path: Path
) -> None:
    journal = await PostgresJournal.open(POSTGRES_DSN, schema=pg_schema, sent_marks=tmp_path)
    try:
        await journal.add(make_jobs(1))
        (claimed,) = await journal.claim("w", lease=60, limit=1)
        with pytest.raises(Exception, match="no order intent"):
            journal.sending(claimed.key)
    finally:
        await journal.close()


def test_files_of_another_boot_or_another_journal_are_not_read(tmp_path: Path) -> None:
    name = journal_name(POSTGRES_DSN, "a")
    assert name != journal_name(POSTGRES_DSN, "b")
    assert journal_name("postgresql://u:secret@h:5432/db", "a") == journal_name(
        "postgresql://other@h/db", "a"
    )  # the user and password are not the journal's name
    other_boot = tmp_path / f"{name}-1-x.sent"
    header = {"run": "x", "boot": "another-boot", "journal": name, "pid": "1", "start": "0"}
    other_boot.write_text(json.dumps({**header, "workers": "w"}) + "\n")
    marks = LocalMarks.open(tmp_path, name)
    assert marks is not None
    try:
        assert marks.gone_workers == []
        assert marks.unsent([("PO-0001", "w", "2026-01-01T00:00:00.000000+00:00")]) == []
    finally:
        marks.close()
    assert other_boot.exists()  # another machine's, maybe: kept until it is stale


def gone_file(
    folder: Path, journal: str, workers: str, marks: list[list[str]], **header: str
) -> None:
    """The marks file of a process that has exited, as it left it."""
    exited = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    fields = {
        "run": "r",
        "boot": Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
        "journal": journal,
        "pid": exited.stdout.strip(),
        "start": "1",
        "workers": workers,
        "pidns": os.readlink("/proc/self/ns/pid"),
        **header,
    }
    lines = [json.dumps(fields), *(json.dumps(mark) for mark in marks)]
    (folder / f"{journal}-{fields['pid']}-{len(list(folder.iterdir()))}.sent").write_text(
        "\n".join(lines) + "\n"
    )


def test_an_intent_marked_in_any_file_that_names_its_worker_was_maybe_sent(tmp_path: Path) -> None:
    name = journal_name(POSTGRES_DSN, "a")
    stamp = "2026-01-01T00:00:00.000000+00:00"
    gone_file(tmp_path, name, "w", [])
    gone_file(tmp_path, name, "w", [["PO-0001", stamp]])  # the same worker through another journal
    marks = LocalMarks.open(tmp_path, name)
    assert marks is not None
    try:
        assert marks.gone_workers == ["w"]
        assert marks.unsent([("PO-0001", "w", stamp), ("PO-0002", "w", stamp)]) == ["PO-0002"]
        assert marks.unsent([("PO-0003", "other-machine", stamp)]) == []
    finally:
        marks.close()


def test_a_file_of_another_pid_namespace_is_not_read(tmp_path: Path) -> None:
    # A container's pid 7 is not this namespace's: nothing can be said of its process.
    name = journal_name(POSTGRES_DSN, "a")
    gone_file(tmp_path, name, "w", [], pidns="pid:[1]")
    marks = LocalMarks.open(tmp_path, name)
    assert marks is not None
    try:
        assert marks.gone_workers == []
    finally:
        marks.close()


def test_stale_files_of_other_journals_whose_process_is_gone_are_deleted(tmp_path: Path) -> None:
    # A journal never opened again would keep its killed processes' files for good.
    name, other = journal_name(POSTGRES_DSN, "a"), journal_name(POSTGRES_DSN, "b")
    week_and_a_day_ago = time.time() - 8 * 86400
    gone_file(tmp_path, other, "w1", [])  # exited, stale
    gone_file(tmp_path, other, "w2", [], boot="another-boot")  # another boot, stale
    gone_file(tmp_path, other, "w3", [])  # exited, recent
    gone_file(tmp_path, other, "w4", [], pidns="pid:[1]")  # another namespace, stale
    running = tmp_path / f"{other}-{os.getpid()}-live.sent"  # this very process, stale
    header = {
        "run": "live",
        "boot": Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
        "journal": other,
        "pid": str(os.getpid()),
        "start": process_start(os.getpid()),
        "workers": "w5",
        "pidns": os.readlink("/proc/self/ns/pid"),
    }
    running.write_text(json.dumps(header) + "\n")
    by_worker = {
        json.loads(path.read_text().splitlines()[0])["workers"]: path for path in tmp_path.iterdir()
    }
    for worker in ("w1", "w2", "w4", "w5"):
        os.utime(by_worker[worker], (week_and_a_day_ago, week_and_a_day_ago))

    marks = LocalMarks.open(tmp_path, name)
    assert marks is not None
    marks.close()

    left = {worker for worker, path in by_worker.items() if path.exists()}
    assert left == {"w3", "w4", "w5"}
