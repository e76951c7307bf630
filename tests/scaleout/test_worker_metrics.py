"""A worker's /metrics, scraped during and after its run, against the sandbox's request log.

``shipping-async worker --metrics-port 0`` in a real process, a sandbox in another, 429s
injected through the sandbox's control API. The counters must equal what the sandbox
logged: requests per operation and status class, orders created, 429s.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from pathlib import Path

import aiohttp
from telemetry.scrape import Samples, scrape, total, value

from shipping_async._hooks import route_of
from shipping_async.scaleout.postgres_journal import PostgresJournal

from .conftest import POSTGRES_DSN
from .processes import Sandbox, Workers, created
from .support import make_job

JOBS = 30
INJECTED_429S = 3
# The operation behind each (method, route) the sandbox logs.
OPERATIONS = {
    ("POST", "/quotes"): "create_quote",
    ("GET", "/quotes/{id}"): "get_quote",
    ("POST", "/orders"): "create_order",
    ("GET", "/orders/{id}"): "get_order",
    ("POST", "/orders/{id}/waybills"): "create_waybill",
    ("GET", "/orders/{id}/pickup_availabilities"): "list_pickup_availabilities",
    ("POST", "/orders/{id}/schedule_pickups"): "schedule_pickup",
}


async def inject_429s(sandbox: Sandbox, count: int) -> None:
    fault = {
        "kind": "status",
        "method": "POST",
        "path": "/orders",
        "status": 429,
        "count": count,
        # What the sandbox itself says at speed 60: its 60 s window lasts 1 real second.
        "message": "20 of 20 in 1 seconds",
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{sandbox.root}/_sandbox/faults",
            json=fault,
            headers={"Authorization": f"Bearer {sandbox.token}"},
        ) as answer,
    ):
        assert answer.status < 300, await answer.text()


def text_of(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


async def line_of(path: Path, pattern: str, workers: Workers, within: float = 30.0) -> str:
    """The first line of the file ``path`` matching ``pattern``, as soon as it is written."""
    async with asyncio.timeout(within):
        while True:
            text = await asyncio.to_thread(text_of, path)
            found = re.search(pattern, text)
            if found:
                return found.group(0)
            if workers.processes[0].poll() is not None:
                raise AssertionError(f"the worker exited without {pattern!r}:\n{workers.logs()}")
            await asyncio.sleep(0.05)


async def scrape_until_an_order(port: int, within: float = 10.0) -> Samples:
    """A scrape that counts at least one order created."""
    async with asyncio.timeout(within):
        while True:
            samples = await scrape(port)
            if value(samples, "shipping_async_orders_created_total", account="north"):
                return samples
            await asyncio.sleep(0.05)


def sandbox_counts(records: list[dict[str, object]]) -> Counter[tuple[str, str]]:
    """Requests per (operation, status class), as the sandbox logged them."""
    counts: Counter[tuple[str, str]] = Counter()
    for record in records:
        operation = OPERATIONS[(str(record["method"]), route_of(str(record["path"])))]
        status = record["status"]
        counts[operation, "error" if status is None else f"{int(str(status)) // 100}xx"] += 1
    return counts


def scraped_counts(samples: Samples) -> Counter[tuple[str, str]]:
    counts: Counter[tuple[str, str]] = Counter()
    for (name, labels), count in samples.items():
        if name == "shipping_async_requests_total" and count:
            label = dict(labels)
            assert label["account"] == "north"
            counts[label["operation"], label["status_class"]] += int(count)
    return counts


async def test_scraped_counters_equal_the_sandbox_request_log(
    sandbox: Sandbox, journal: PostgresJournal, pg_schema: str, tmp_path: Path
) -> None:
    await journal.add([make_job(f"m-{index:02d}", "north") for index in range(JOBS)])
    await inject_429s(sandbox, INJECTED_429S)
    env = {"SHIPPING_ACCESS_TOKEN__NORTH": sandbox.token, "SHIPPING_BASE_URL": sandbox.base_url}
    worker = Workers(
        f"{POSTGRES_DSN}?schema={pg_schema}",
        "memory",
        env,
        tmp_path,
        extra=("--metrics-port", "0", "--metrics-linger", "5"),
    )
    try:
        worker.start(1)
        err = tmp_path / "worker0.err"
        url = await line_of(err, r"http://127\.0\.0\.1:\d+/metrics", worker)
        port = int(url.rsplit(":", 1)[1].split("/")[0])

        # During the run: the series are there and count what has happened so far (an
        # order the sandbox logged is counted once its answer reached the worker).
        await sandbox.wait_for_orders(5)
        during = await scrape_until_an_order(port)
        assert value(during, "shipping_async_orders_created_total", account="north") <= JOBS
        assert total(during, "shipping_async_jobs", account="north") == JOBS

        # After the run (the worker lingers for a last scrape): equal to the request log.
        await line_of(err, r"the run is over", worker)
        after = await scrape(port)
        records = await sandbox.requests()
        assert await worker.wait(within=30) == [0], worker.logs()
    finally:
        worker.stop()

    orders = [r for r in records if (r["method"], r["path"]) == ("POST", "/orders")]
    assert sum(created(orders).values()) == JOBS
    assert value(after, "shipping_async_orders_created_total", account="north") == JOBS
    rate_limited = [r for r in orders if r["status"] == 429]
    assert len(rate_limited) == INJECTED_429S
    assert (
        value(after, "shipping_async_rate_limited_total", account="north", operation="create_order")
        == INJECTED_429S
    )
    assert scraped_counts(after) == sandbox_counts(records)
    assert value(after, "shipping_async_rate_limit_window_seconds", account="north") == 1
    assert value(after, "shipping_async_jobs", account="north", state="done") == JOBS
    assert value(after, "shipping_async_unknown_jobs", account="north") == 0
    assert value(after, "shipping_async_order_permits_in_use", account="north") == 0
