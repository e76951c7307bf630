"""The bulk pipeline end to end against the sandbox on a scaled clock."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from shipping_async.bulk.journal import JobState
from shipping_async.bulk.results import ResultStatus, ShipmentResult, Stage
from shipping_async.bulk.shipper import BulkShipper
from shipping_async.bulk.sqlite_journal import SQLiteJournal
from shipping_async.errors import EstimateExpiredError
from shipping_async.models import Order, OrderRequest
from shipping_async.resources import Orders
from shipping_async.sandbox import SandboxServer
from tests.bulk.support import client_for, make_jobs, orders_created, statuses

SPEED = 100.0  # the API's 60 s window lasts 0.6 s


async def ship_all(shipper: BulkShipper, jobs: object) -> list[ShipmentResult]:
    return [result async for result in shipper.run(jobs)]  # type: ignore[arg-type]


async def test_every_job_goes_through_every_stage_hub_and_direct() -> None:
    async with SandboxServer(speed=SPEED, seed=1) as sandbox, client_for(sandbox) as client:
        results = await ship_all(BulkShipper(client), make_jobs(30))

        assert Counter(r.status for r in results) == {ResultStatus.DONE: 30}
        hub = [r for r in results if r.hub]
        assert len(hub) == 10
        assert all(len(r.waybills) == 2 and all(r.waybills) for r in hub)
        assert all(len(r.waybills) == 1 for r in results if not r.hub)
        assert all(r.pickup_confirmation and r.order_id and r.cost for r in results)
        assert orders_created(sandbox) == {r.key: 1 for r in results}
        booked = [
            record
            for record in sandbox.control.requests(method="POST")
            if record.path.endswith("/schedule_pickups") and record.status == 201
        ]
        assert len(booked) == 30


async def test_a_failure_at_each_stage_is_a_result_and_the_batch_goes_on(tmp_path: Path) -> None:
    async with SandboxServer(speed=SPEED, seed=2) as sandbox, client_for(sandbox) as client:
        control = sandbox.control
        control.add_fault("status", "/quotes", method="POST", status=400)
        control.add_fault("status", "/orders", method="POST", status=400)
        control.add_fault("drop_after", "/orders", method="POST")
        control.add_fault("status", "/orders/*/waybills", method="POST", status=503)
        control.add_fault("status", "/orders/*/pickup_availabilities", method="GET", status=500)
        control.add_fault("carrier_rejection", "/orders/*/schedule_pickups", method="POST")
        journal = tmp_path / "batch.journal"
        jobs = make_jobs(12)

        results = await ship_all(BulkShipper(client, journal=journal), jobs)

        outcome = Counter((r.status, r.stage, r.retryable) for r in results)
        assert outcome == {
            (ResultStatus.DONE, Stage.PICKUP, False): 6,
            (ResultStatus.FAILED, Stage.QUOTE, False): 1,
            (ResultStatus.FAILED, Stage.ORDER, False): 1,
            (ResultStatus.UNKNOWN, Stage.ORDER, False): 1,
            (ResultStatus.FAILED, Stage.WAYBILL, True): 1,
            (ResultStatus.FAILED, Stage.PICKUP, True): 2,
        }
        rejected = [r for r in results if r.error and "carrier rejected" in r.error]
        assert len(rejected) == 1
        assert rejected[0].order_id is not None

        # A second run retries what is worth retrying and never orders anything twice.
        again = await ship_all(BulkShipper(client, journal=journal, retry_failed=True), jobs)
        final = Counter(r.status for r in again)
        assert final == {ResultStatus.DONE: 9, ResultStatus.FAILED: 2, ResultStatus.UNKNOWN: 1}
        assert max(orders_created(sandbox).values()) == 1
        unknown = [r for r in again if r.status is ResultStatus.UNKNOWN]
        # The dropped answer did create an order: the journal has no id for it and the
        # job was not sent again.
        assert orders_created(sandbox)[unknown[0].key] == 1


async def test_an_expired_estimate_is_requoted_never_ordered() -> None:
    # Estimates live 40 s of sandbox time; five quotes answer 50 s after they were made.
    # (A job is quoted only once its order can be sent, so only a late answer ages one.)
    async with (
        SandboxServer(speed=SPEED, seed=3, estimate_validity=40.0) as sandbox,
        client_for(sandbox) as client,
    ):
        sandbox.control.add_fault("delay_after", "/quotes", method="POST", count=5, seconds=50)
        results = await ship_all(BulkShipper(client), make_jobs(50))

        assert Counter(r.status for r in results) == {ResultStatus.DONE: 50}
        assert statuses(sandbox, "POST", "/orders") == {201: 50}
        assert len(sandbox.control.requests(method="POST", path="/quotes")) > 50


async def test_batch_time_is_set_by_the_rate_limit_with_no_429() -> None:
    async with SandboxServer(speed=SPEED, seed=4) as sandbox, client_for(sandbox) as client:
        started = time.monotonic()
        results = await ship_all(BulkShipper(client), make_jobs(60))
        elapsed = time.monotonic() - started

        bound = 60 * (3 - 1) / SPEED  # 1.2 s: the third 20 go two windows after the first
        assert len(results) == 60
        assert statuses(sandbox, "POST", "/orders") == {201: 60}
        assert bound <= elapsed < bound * 1.1 + 0.6


async def test_a_restarted_run_waits_for_the_window_its_predecessor_filled(
    tmp_path: Path,
) -> None:
    path = tmp_path / "batch.journal"
    jobs = make_jobs(40)
    async with SandboxServer(speed=SPEED, seed=8) as sandbox:
        async with client_for(sandbox) as client:
            first = await ship_all(BulkShipper(client, journal=path), jobs[:20])
        assert statuses(sandbox, "POST", "/orders") == {201: 20}

        # A new process: a new client whose limiter starts empty; the server's window is
        # still full of the first run's 20 orders.
        async with client_for(sandbox) as client:
            rest = await ship_all(BulkShipper(client, journal=path), jobs)

        assert Counter(r.status for r in first + rest) == {ResultStatus.DONE: 60}
        assert statuses(sandbox, "POST", "/orders") == {201: 40}
        assert orders_created(sandbox) == {job.order.customer_reference: 1 for job in jobs}


async def test_a_429_storm_from_another_client_loses_and_duplicates_nothing() -> None:
    async with SandboxServer(speed=SPEED, seed=5) as sandbox, client_for(sandbox) as client:
        stop = asyncio.Event()

        async def eat_budget() -> None:
            # Another process on the same account: orders the pipeline cannot see.
            headers = {"Authorization": f"Bearer {sandbox.token}"}
            async with aiohttp.ClientSession(headers=headers) as session:
                while not stop.is_set():
                    for _ in range(8):
                        async with session.post(f"{sandbox.base_url}/orders", json={}) as resp:
                            await resp.read()
                    await asyncio.sleep(0.2)

        storm = asyncio.create_task(eat_budget())
        try:
            results = await ship_all(BulkShipper(client), make_jobs(40))
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await storm

        assert Counter(r.status for r in results) == {ResultStatus.DONE: 40}
        assert orders_created(sandbox) == {r.key: 1 for r in results}
        assert statuses(sandbox, "POST", "/orders")[429] > 0


async def test_graceful_stop_leaves_unstarted_jobs_resumable(tmp_path: Path) -> None:
    path = tmp_path / "batch.journal"
    async with SandboxServer(speed=SPEED, seed=6) as sandbox, client_for(sandbox) as client:
        shipper = BulkShipper(client, journal=path)
        first: list[ShipmentResult] = []
        async for result in shipper.run(make_jobs(60)):
            first.append(result)
            if len(first) == 5:
                shipper.stop()
        assert 5 <= len(first) < 60
        async with await SQLiteJournal.open(path) as journal:
            counts = await journal.counts()
            assert counts[JobState.ORDERING] == counts[JobState.UNKNOWN] == 0
            assert counts[JobState.DONE] == len(first)

        rest = await ship_all(BulkShipper(client, journal=path), make_jobs(60))
        assert sum(r.resumed for r in rest) == len(first)
        assert Counter(r.status for r in rest) == {ResultStatus.DONE: 60}
        assert orders_created(sandbox) == {f"PO-{i:04d}": 1 for i in range(60)}


@pytest.mark.parametrize("concurrency", [pytest.param(1, id="one"), pytest.param(7, id="seven")])
async def test_in_flight_work_is_bounded_by_concurrency(concurrency: int) -> None:
    async with SandboxServer(speed=SPEED, seed=7) as sandbox, client_for(sandbox) as client:
        pulled = 0
        peak = 0
        shipper = BulkShipper(client, concurrency=concurrency)

        def jobs():  # type: ignore[no-untyped-def]
            nonlocal pulled, peak
            for job in make_jobs(25):
                pulled += 1
                peak = max(peak, shipper.progress.in_flight)
                yield job

        results = await ship_all(shipper, jobs())
        assert len(results) == 25
        assert peak <= concurrency


async def test_an_estimate_the_client_finds_expired_after_its_wait_is_requoted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with SandboxServer(speed=SPEED, seed=9) as sandbox, client_for(sandbox) as client:
        create = Orders.create
        refused: list[int] = []

        async def expired_once(self: Orders, request: OrderRequest, **options: Any) -> Order:
            if not refused:  # what the client's re-check after a long permit wait raises
                refused.append(request.quote_estimate_id)
                raise EstimateExpiredError(request.quote_estimate_id, "expired while queued")
            return await create(self, request, **options)

        monkeypatch.setattr(Orders, "create", expired_once)
        (result,) = await ship_all(BulkShipper(client), make_jobs(1))

        assert result.status == ResultStatus.DONE
        assert statuses(sandbox, "POST", "/orders") == {201: 1}
        assert len(sandbox.control.requests(method="POST", path="/quotes")) == 2
