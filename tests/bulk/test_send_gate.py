"""The order intent is recorded inside the request's write: the real client, the sandbox and
a SQLite journal file, with "a crash now" read from a copy of the journal's files.

A copy of the journal file and its write-ahead log taken while the run goes on is what a
SIGKILL at that moment would leave: opening it settles the dead run as a resumed run
does (an intent without its answer becomes ``unknown``).
"""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest

from shipping_async import AsyncShippingClient
from shipping_async._retry import Operation, RetryPolicy, order_intent
from shipping_async._send import send_with_retries
from shipping_async._send_gate import GatedBody
from shipping_async.bulk import _sent_marks, _sqlite_writer
from shipping_async.bulk._gate import OrderGate
from shipping_async.bulk.choice import cheapest
from shipping_async.bulk.journal import JobRecord, JobState, JournalError, LeaseLostError
from shipping_async.bulk.pipeline import JobPipeline
from shipping_async.bulk.sqlite_journal import SQLiteJournal
from shipping_async.clock import ManualClock
from shipping_async.errors import APIConnectionError
from shipping_async.limiter import Permit, RollingWindowLimiter
from shipping_async.sandbox import SandboxServer
from tests.bulk.support import make_job, orders_created, statuses

LEASE = 600.0
KEY = "G-1"


class _RefusingConnector(aiohttp.TCPConnector):
    """Refuses the next ``refuse`` connections for POST /orders, as a closed port does
    (aiohttp raises the same error from ``connect()``, before any byte is written)."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse = 0
        self.refused = asyncio.Event()

    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:  # noqa: ASYNC109
        if self.refuse and req.method == "POST" and req.url.path.endswith("/orders"):
            self.refuse -= 1
            self.refused.set()
            refused = ConnectionRefusedError(111, "Connection refused")
            raise aiohttp.ClientConnectorError(req.connection_key, refused)
        return await super().connect(req, traces, timeout)


async def _crash_now(path: Path, copy: Path) -> JobState:
    """The job's state as a run resumed after a SIGKILL at this moment would find it."""
    for suffix in ("", "-wal"):
        source = Path(f"{path}{suffix}")
        if await asyncio.to_thread(source.exists):
            await asyncio.to_thread(shutil.copyfile, source, f"{copy}{suffix}")
    async with await SQLiteJournal.open(copy) as journal:
        record = await journal.get(KEY)
    assert record is not None
    return record.state


async def _until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(2500):
        if condition():
            return
        await asyncio.sleep(0.002)
    raise AssertionError(f"never: {what}")


def _pipeline(client: AsyncShippingClient, journal: SQLiteJournal) -> JobPipeline:
    gate = OrderGate(client.order_limiter, client.clock, asyncio.Event())
    return JobPipeline(client, journal, choose=cheapest(), gate=gate, quote_ahead=20, lease=LEASE)


async def _claimed(journal: SQLiteJournal) -> JobRecord:
    await journal.add([make_job(KEY)])
    [record] = await journal.claim("host:1:w", lease=LEASE, limit=1, keys=[KEY])
    return record


# A refused connection records no intent: the job is still pending (its quote, made just
# before, is written with the intent only). A 429 withdraws the intent: quoted.
@pytest.mark.parametrize(
    ("answer", "waits_as"),
    [
        pytest.param("refused", JobState.PENDING, id="refused"),
        pytest.param("429", JobState.QUOTED, id="429"),
    ],
)
async def test_an_order_that_certainly_created_nothing_leaves_no_intent_to_become_unknown(
    tmp_path: Path, answer: str, waits_as: JobState
) -> None:
    path, copy = tmp_path / "batch.journal", tmp_path / "crashed.journal"
    # The client's backoff and 429 pause wait on a clock that stands still until told.
    clock = ManualClock(wall_origin=datetime.now(UTC))
    connector = _RefusingConnector()
    async with (
        SandboxServer(speed=1, seed=3) as sandbox,
        aiohttp.ClientSession(connector=connector) as session,
        AsyncShippingClient(
            sandbox.token,
            base_url=sandbox.base_url,
            session=session,
            clock=clock,
            order_limiter=RollingWindowLimiter(20, 60.0, clock=clock),
            retry_base_delay=5.0,
        ) as client,
        await SQLiteJournal.open(path, clock=clock) as journal,
    ):
        if answer == "refused":
            connector.refuse = 1
        else:
            sandbox.control.add_fault("status", "/orders", method="POST", status=429)
        record = await _claimed(journal)
        task = asyncio.create_task(_pipeline(client, journal).ship(record))
        if answer == "refused":
            await _until(connector.refused.is_set, "the connection was refused")
        else:
            await _until(lambda: statuses(sandbox, "POST", "/orders")[429] == 1, "the 429")
        sandbox.control.clear_faults()
        # The client waits (backoff, or the 429 pause) before it sends again.
        await _until(lambda: bool(clock._sleepers), "the client waits to re-send")

        current = await journal.get(KEY)
        assert current is not None
        assert current.state is waits_as
        assert await _crash_now(path, copy) is waits_as  # resumable, not unknown
        assert orders_created(sandbox) == {}

        while not task.done():
            clock.advance(1.0)
            await asyncio.sleep(0.005)
        done = await task
        assert done.state is JobState.DONE, done.error
        assert orders_created(sandbox) == {KEY: 1}


class _LosingLimiter(RollingWindowLimiter):
    """Runs ``lose`` (once) right after it grants a permit."""

    lose: Callable[[], Awaitable[None]] | None = None

    async def acquire(self, *, front: bool = False) -> Permit:
        permit = await super().acquire(front=front)
        if self.lose is not None:
            lose, self.lose = self.lose, None
            await lose()
        return permit


async def test_an_intent_refused_at_the_write_sends_nothing_and_says_why(
    tmp_path: Path,
) -> None:
    # The lease lapses and the job is claimed again once the job holds its permit, before
    # its body is written: the stale task's intent is refused inside aiohttp's write,
    # which must neither send the request nor disguise the refusal as a network error.
    clock = ManualClock(wall_origin=datetime.now(UTC))
    limiter = _LosingLimiter(20, 60.0, clock=clock)
    async with (
        SandboxServer(speed=1, seed=4) as sandbox,
        AsyncShippingClient(
            sandbox.token, base_url=sandbox.base_url, clock=clock, order_limiter=limiter
        ) as client,
        await SQLiteJournal.open(tmp_path / "batch.journal", clock=clock) as journal,
    ):
        await journal.add([make_job(KEY)])
        [record] = await journal.claim("host:1:w", lease=5.0, limit=1, keys=[KEY])

        async def lapse_and_claim_again() -> None:
            clock.advance(10.0)
            await journal.claim("host:1:w", lease=LEASE, limit=1, keys=[KEY])

        limiter.lose = lapse_and_claim_again
        with pytest.raises(LeaseLostError):
            await _pipeline(client, journal).ship(record)

        assert statuses(sandbox, "POST", "/orders") == {}
        assert limiter.available() == 20  # the permit went back unused
        current = await journal.get(KEY)
        assert current is not None
        # Nothing of the stale claim was written (its quote goes with the intent only).
        assert current.state is JobState.PENDING
        assert current.quote_id is None


async def test_an_intents_sent_mark_follows_its_commit_and_nothing_runs_before_the_first_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A kill before the sent mark finds an intent that a resumed run sends again; a kill
    # between the mark and the first byte would leave a job unknown that the server never
    # heard of: so the mark is written once the commit is on disk, and in the same turn
    # of the event loop as the request's first byte. Count the loop's turns at each.
    turns = 0
    events: list[tuple[str, int]] = []

    def tick() -> None:
        nonlocal turns
        turns += 1
        if not stop.is_set():
            asyncio.get_running_loop().call_soon(tick)

    commit = _sqlite_writer.commit

    def counted_commit(db: Any) -> None:
        commit(db)
        held = journal._held.get(KEY)
        if held is not None and held.state is JobState.ORDERING:
            events.append(("intent committed", turns))

    note = _sent_marks.SentMarks.note

    def counted_note(self: Any, key: str, stamp: str) -> None:
        events.append(("marked", turns))
        note(self, key, stamp)

    monkeypatch.setattr(_sqlite_writer, "commit", counted_commit)
    monkeypatch.setattr(_sent_marks.SentMarks, "note", counted_note)
    stop = asyncio.Event()
    async with SandboxServer(speed=1, seed=5) as sandbox:
        async with (
            AsyncShippingClient(sandbox.token, base_url=sandbox.base_url) as client,
            await SQLiteJournal.open(tmp_path / "batch.journal") as journal,
        ):
            record = await _claimed(journal)
            original = aiohttp.payload.BytesPayload.write_with_length

            async def written(self: Any, writer: Any, content_length: Any) -> None:
                if isinstance(self, GatedBody):  # the order's body, its intent recorded
                    events.append(("written", turns))
                await original(self, writer, content_length)

            monkeypatch.setattr(aiohttp.payload.BytesPayload, "write_with_length", written)
            asyncio.get_running_loop().call_soon(tick)
            try:
                done = await _pipeline(client, journal).ship(record)
            finally:
                stop.set()
        assert statuses(sandbox, "POST", "/orders") == {201: 1}
    assert done.state is JobState.DONE
    (committed, at_commit), (marked, at_mark), (write, at_write) = events[:3]
    assert (committed, marked, write) == ("intent committed", "marked", "written")
    assert at_commit <= at_mark == at_write


async def test_an_intent_whose_sent_mark_cannot_be_written_sends_nothing_and_is_taken_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(self: Any, key: str, stamp: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_sent_marks.SentMarks, "note", full_disk)
    async with (
        SandboxServer(speed=1, seed=6) as sandbox,
        AsyncShippingClient(sandbox.token, base_url=sandbox.base_url) as client,
        await SQLiteJournal.open(tmp_path / "batch.journal") as journal,
    ):
        record = await _claimed(journal)
        with pytest.raises(JournalError, match="sent marks"):
            await _pipeline(client, journal).ship(record)

        assert statuses(sandbox, "POST", "/orders") == {}
        current = await journal.get(KEY)
        assert current is not None
        assert current.state is JobState.QUOTED


async def test_an_order_whose_request_times_out_while_its_intent_commits_is_not_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The intent's commit runs to its end (its outcome known), but the request that timed
    # out meanwhile is never written, gets no sent mark, and its intent is taken back.
    go_on = threading.Event()
    commit = _sqlite_writer.commit

    def slow_commit(db: Any) -> None:
        held = journal._held.get(KEY)
        if held is not None and held.state is JobState.ORDERING:
            go_on.wait(1.0)  # past the request's timeout
        commit(db)

    monkeypatch.setattr(_sqlite_writer, "commit", slow_commit)
    path = tmp_path / "batch.journal"
    async with (
        SandboxServer(speed=1, seed=7) as sandbox,
        AsyncShippingClient(
            sandbox.token, base_url=sandbox.base_url, timeout=0.2, max_retries=0
        ) as client,
        await SQLiteJournal.open(path) as journal,
    ):
        record = await _claimed(journal)
        try:
            done = await _pipeline(client, journal).ship(record)
        finally:
            go_on.set()

        assert statuses(sandbox, "POST", "/orders") == {}
        assert done.state is JobState.FAILED, done
        assert done.error_stage == "order"
        assert done.retryable, done.error  # certainly never written: safe to send again
        marks = await asyncio.to_thread(Path(f"{path}-sent").read_bytes)
        assert KEY.encode() not in marks


async def test_a_multipart_order_refused_before_any_byte_withdraws_its_intent() -> None:
    # Without a body that opens the gate (multipart), the intent is recorded just before
    # the attempt; a connection that never opened takes it back before the backoff.
    events: list[str] = []

    class Intent:
        async def granted(self) -> None:
            events.append("granted")

        def sending(self) -> None:
            events.append("sending")

        async def withdrawn(self) -> None:
            events.append("withdrawn")

    async def attempt() -> None:
        events.append("attempt")
        refused = ConnectionRefusedError(111, "Connection refused")
        cause = aiohttp.ClientConnectorError(SimpleNamespace(host="h", port=1), refused)
        raise APIConnectionError("refused", method="POST", path="/orders") from cause

    clock = ManualClock()
    limiter = RollingWindowLimiter(20, 60.0, clock=clock)
    context = order_intent.set(Intent())
    try:
        with pytest.raises(APIConnectionError):
            await send_with_retries(
                attempt,
                operation=Operation(name="create_order", method="POST", path="/orders"),
                policy=RetryPolicy(max_retries=0),
                clock=clock,
                limiter=limiter,
            )
    finally:
        order_intent.reset(context)
    assert events == ["granted", "sending", "attempt", "withdrawn"]
    assert limiter.available() == 20
