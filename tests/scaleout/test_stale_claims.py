"""Issue 17 with real processes: leases lapsing under load never order anything twice.

Two ``shipping-async worker`` processes serve four accounts of one sandbox process, on
the machine's PostgreSQL journal and Redis limiter, with a lease of half a second and
every lease renewal slowed by most of a second (an overloaded database): leases lapse
while jobs wait for permits, while orders are on the wire, and workers claim each
other's (and their own) jobs again. Judged by the sandbox's own order list.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from shipping_async.bulk.journal import JobState
from shipping_async.scaleout.postgres_journal import PostgresJournal

from .conftest import POSTGRES_DSN, REDIS_URL
from .processes import SPEED, Sandbox, Workers, created, slow_renewals_cli, start_sandbox
from .support import make_job

ACCOUNTS = ("north", "south", "east", "west")
PER_ACCOUNT = 25


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{name} tok-{name}\n" for name in ACCOUNTS))
    server = start_sandbox(f"tok-{ACCOUNTS[0]}", tokens_file=tokens)
    yield server
    server.stop()


async def test_lapsing_leases_under_a_slow_journal_order_each_reference_once(
    sandbox: Sandbox,
    journal: PostgresJournal,
    pg_schema: str,
    prefix: str,
    tmp_path: Path,
    redis_client: object,
) -> None:
    keys = [f"{name}-{index:03d}" for name in ACCOUNTS for index in range(PER_ACCOUNT)]
    await journal.add([make_job(key, key.split("-")[0]) for key in keys])
    env = {f"SHIPPING_ACCESS_TOKEN__{name.upper()}": f"tok-{name}" for name in ACCOUNTS}
    env |= {"SHIPPING_BASE_URL": sandbox.base_url, "RENEW_DELAY": "1.0"}
    workers = Workers(
        f"{POSTGRES_DSN}?schema={pg_schema}",
        f"{REDIS_URL}?prefix={prefix}",
        env,
        tmp_path,
        lease=0.5,
        argv=slow_renewals_cli,
    )
    # Some orders and waybills answer a real second late (the window is one real second
    # at this speed): leases lapse while those requests are on the wire.
    await _slow_answers(sandbox, "/orders", count=12)
    await _slow_answers(sandbox, "/orders/*/waybills", count=12)
    workers.start(2)
    try:
        codes = await workers.wait(within=60)
    finally:
        workers.stop()

    orders = await sandbox.orders()
    assert created(orders) == dict.fromkeys(keys, 1), workers.logs()  # never twice
    assert (await journal.counts())[JobState.DONE] == len(keys), workers.logs()
    assert codes == [0, 0], workers.logs()
    # The leases did lapse and jobs were claimed again: the race was really run.
    assert any([record.attempts > 1 async for record in journal.records()])
    assert "Traceback" not in workers.logs()


async def _slow_answers(sandbox: Sandbox, path: str, *, count: int) -> None:
    fault = {"method": "POST", "path": path, "kind": "delay", "seconds": SPEED, "count": count}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{sandbox.root}/_sandbox/faults",
            json=fault,
            headers={"Authorization": f"Bearer {sandbox.token}"},
        ) as answer,
    ):
        assert answer.status < 300, await answer.text()
