"""A quote this run just made is ordered without GET /quotes/{id}; an older one is checked."""

from __future__ import annotations

from collections import Counter

from shipping_async.bulk.pipeline import QUOTE_FRESHNESS
from shipping_async.bulk.results import ResultStatus
from shipping_async.bulk.shipper import BulkShipper
from shipping_async.sandbox import SandboxServer
from tests.bulk.support import client_for, make_jobs

SPEED = 100.0  # the API's 60 s window lasts 0.6 s


def quote_checks(sandbox: SandboxServer) -> int:
    return sum(
        1 for record in sandbox.control.requests(method="GET") if record.path.startswith("/quotes/")
    )


async def test_a_fresh_quote_is_ordered_without_asking_again() -> None:
    async with SandboxServer(speed=SPEED, seed=11) as sandbox, client_for(sandbox) as client:
        results = [result async for result in BulkShipper(client).run(make_jobs(20))]

        assert Counter(r.status for r in results) == {ResultStatus.DONE: 20}
        assert quote_checks(sandbox) == 0


async def test_a_quote_that_waited_a_window_is_checked_before_its_order() -> None:
    # 40 jobs, 20 orders per window: the second twenty are quoted at once and wait about a
    # window (60 s) for their permits, longer than the freshness.
    assert QUOTE_FRESHNESS < 60
    async with SandboxServer(speed=SPEED, seed=12) as sandbox, client_for(sandbox) as client:
        results = [result async for result in BulkShipper(client).run(make_jobs(40))]

        assert Counter(r.status for r in results) == {ResultStatus.DONE: 40}
        assert 0 < quote_checks(sandbox) <= 20
