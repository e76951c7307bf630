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


async def test_a_quote_older_than_the_freshness_is_checked_before_its_order() -> None:
    # A job is quoted only once its order can be sent, so only a late answer ages a quote:
    # three quotes answer 40 s (API time) after they were made.
    assert QUOTE_FRESHNESS < 40
    async with SandboxServer(speed=SPEED, seed=12) as sandbox, client_for(sandbox) as client:
        sandbox.control.add_fault("delay_after", "/quotes", method="POST", count=3, seconds=40)
        results = [result async for result in BulkShipper(client).run(make_jobs(10))]

        assert Counter(r.status for r in results) == {ResultStatus.DONE: 10}
        assert quote_checks(sandbox) == 3
