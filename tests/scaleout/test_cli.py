"""The scale-out commands: journal init and reconcile, status, and a worker's setup checks.

They run in this process through the ``register``/``handler`` pair the CLI uses.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterator

import pytest

from shipping_async.bulk.journal import JobState
from shipping_async.cli import journal as journal_command
from shipping_async.cli import status as status_command
from shipping_async.cli import worker as worker_command
from shipping_async.scaleout.postgres_journal import PostgresJournal
from tests.pg_schemas import POSTGRES_DSN, drop_schema, new_schema

from .support import make_job


def shipping_async(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="shipping-async")
    commands = parser.add_subparsers(dest="command", required=True)
    for module in (journal_command, status_command, worker_command):
        module.register(commands)
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


@pytest.fixture
def schema() -> Iterator[str]:
    name = new_schema()
    yield name
    asyncio.run(drop_schema(name))


def url(schema: str) -> str:
    return f"{POSTGRES_DSN}?schema={schema}"


def fill(schema: str) -> None:
    """Two accounts; one north job whose order outcome is unknown."""

    async def add() -> None:
        journal = await PostgresJournal.open(POSTGRES_DSN, schema=schema)
        try:
            await journal.add([make_job("n-1", "north"), make_job("n-2", "north")])
            await journal.add([make_job("s-1", "south")])
            (record,) = await journal.claim("w", lease=30, limit=1, account="north")
            token = record.claim_token
            assert token is not None
            await journal.record(token, record.key, JobState.QUOTED, quote_id=1, estimate_id=2)
            await journal.begin_order(token, record.key, quote_id=1, estimate_id=2)
            await journal.finish(token, record.key, JobState.UNKNOWN, error="no answer")
        finally:
            await journal.close()

    asyncio.run(add())


def test_journal_init_creates_the_schema_once(
    schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert shipping_async("journal", "init", "--journal", url(schema)) == 0
    assert shipping_async("journal", "init", "--journal", url(schema)) == 0
    first, second = capsys.readouterr().out.splitlines()
    assert "applied 1" in first
    assert "nothing to do" in second


def test_journal_init_wants_a_postgresql_url(capsys: pytest.CaptureFixture[str]) -> None:
    assert shipping_async("journal", "init", "--journal", "batch.journal") == 2
    assert "postgresql://" in capsys.readouterr().err


def test_status_shows_states_per_account_and_the_jobs_to_reconcile(
    schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fill(schema)
    assert shipping_async("status", "--journal", url(schema)) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["account", *(state.value for state in JobState), "total"]
    assert lines[1].split() == ["north", "1", "0", "0", "0", "0", "0", "0", "1", "2"]
    assert lines[2].split() == ["south", "1", "0", "0", "0", "0", "0", "0", "0", "1"]
    assert "1 job(s) need reconciliation" in out
    assert "n-1  account=north  customer_reference=n-1" in out


def test_reconcile_settles_an_unknown_job(schema: str, capsys: pytest.CaptureFixture[str]) -> None:
    fill(schema)
    assert shipping_async("journal", "reconcile", "--journal", url(schema), "n-1", "4711") == 0
    assert capsys.readouterr().out.strip() == "n-1: ordered"
    assert shipping_async("journal", "reconcile", "--journal", url(schema), "n-1", "none") == 2
    assert "nothing to reconcile" in capsys.readouterr().err
    shipping_async("status", "--journal", url(schema))
    assert "reconciliation" not in capsys.readouterr().out


def test_worker_names_every_account_without_a_token_before_starting(
    schema: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(schema)
    monkeypatch.setenv("SHIPPING_ACCESS_TOKEN__NORTH", "tok")
    monkeypatch.setenv("SHIPPING_BASE_URL", "http://127.0.0.1:9/client_api/v2")
    monkeypatch.delenv("SHIPPING_ACCESS_TOKEN__SOUTH", raising=False)
    assert shipping_async("worker", "--journal", url(schema), "--limiter", "memory") == 2
    err = capsys.readouterr().err
    assert "SHIPPING_ACCESS_TOKEN__SOUTH" in err
    assert "tok" not in err.replace("token", "")


def test_worker_refuses_a_bad_rate(capsys: pytest.CaptureFixture[str]) -> None:
    code = shipping_async("worker", "--journal", "postgresql://x/y", "--rate-limit", "20")
    assert code == 2
    assert "expected N/SECONDS" in capsys.readouterr().err
