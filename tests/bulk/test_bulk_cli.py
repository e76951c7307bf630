"""The bulk command: crash (SIGKILL) and resume, Ctrl-C and resume, bad rows, arguments."""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import random
import signal
import sys
from pathlib import Path

import pytest

from shipping_async.bulk.journal import JobState
from shipping_async.bulk.sqlite_journal import SQLiteJournal
from shipping_async.cli import bulk
from shipping_async.sandbox import SandboxServer
from tests.bulk.support import orders_created, write_csv

EXAMPLE = Path(__file__).parents[2] / "examples" / "shipments.csv"
SPEED = 100.0
# `bulk` is run through its own parser: the lead registers it in the shared CLI.
RUNNER = (
    "import argparse, sys\n"
    "from shipping_async.cli import bulk\n"
    "parser = argparse.ArgumentParser(prog='shipping-async')\n"
    "bulk.register(parser.add_subparsers(dest='command'))\n"
    "args = parser.parse_args(sys.argv[1:])\n"
    "sys.exit(args.handler(args))\n"
)


def references(source: Path = EXAMPLE) -> list[str]:
    with source.open(newline="") as file:
        return [row["customer_reference"] for row in csv.DictReader(file)]


def doubled_example(folder: Path) -> Path:
    """The example twice over (120 shipments, six rate windows), references made unique."""
    rows = list(csv.DictReader(EXAMPLE.open(newline="")))
    source = folder / "shipments.csv"
    with source.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        for copy in ("A", "B"):
            for row in rows:
                writer.writerow(
                    {**row, "customer_reference": f"{row['customer_reference']}-{copy}"}
                )
    return source


async def start_cli(
    sandbox: SandboxServer, journal: Path, *extra: str, source: Path = EXAMPLE
) -> asyncio.subprocess.Process:
    env = {**os.environ, "SHIPPING_ACCESS_TOKEN": sandbox.token}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", RUNNER, "bulk", str(source),
        "--base-url", sandbox.base_url,
        "--rate-limit", f"20/{60 / SPEED:g}",
        "--journal", str(journal),
        "--progress", "plain",
        *extra,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip


def write_reconciliation(sandbox: SandboxServer, path: Path, source: Path) -> None:
    """What the caller knows: the orders the account holds, by customer_reference.

    A shipment with no order there was never created ("" order id); the command applies
    a row only to shipments whose outcome is unknown.
    """
    ids = {
        record.customer_reference: record.order_id
        for record in sandbox.control.requests(method="POST", path="/orders")
        if record.order_id is not None
    }
    with path.open("w", newline="") as file:
        rows = csv.writer(file)
        rows.writerow(["key", "order_id"])
        for reference in references(source):
            rows.writerow([reference, ids.get(reference, "")])


async def test_killed_at_random_points_and_resumed_every_job_is_ordered_exactly_once(
    tmp_path: Path,
) -> None:
    rng = random.Random(20260105)
    journal, reconciliation = tmp_path / "batch.journal", tmp_path / "known.csv"
    source = doubled_example(tmp_path)
    async with SandboxServer(speed=SPEED, seed=11) as sandbox:
        kills = 0
        for attempt in range(8):
            extra = ("--resume", "--reconcile", str(reconciliation)) if attempt else ()
            cli = await start_cli(sandbox, journal, *extra, source=source)
            if kills < 3:
                try:
                    await asyncio.wait_for(cli.wait(), timeout=rng.uniform(0.5, 1.3))
                except TimeoutError:
                    cli.kill()
                    kills += 1
            code = await cli.wait()
            output = (await cli.stdout.read()).decode() if cli.stdout else ""
            if code == 0:
                break
            await asyncio.sleep(0.05)  # requests cut off by the kill finish in the sandbox
            write_reconciliation(sandbox, reconciliation, source)
        assert code == 0, output
        assert kills == 3

        assert orders_created(sandbox) == {reference: 1 for reference in references(source)}
        async with await SQLiteJournal.open(journal) as store:
            counts = await store.counts()
            assert counts[JobState.DONE] == 120


async def test_sigint_stops_gracefully_and_the_resume_finishes(tmp_path: Path) -> None:
    journal = tmp_path / "batch.journal"
    async with SandboxServer(speed=SPEED, seed=12) as sandbox:
        cli = await start_cli(sandbox, journal)
        assert cli.stdout is not None
        while b"done PO-" not in await cli.stdout.readline():
            pass
        cli.send_signal(signal.SIGINT)
        output = (await cli.stdout.read()).decode()
        assert await cli.wait() == 130
        assert "--resume" in output

        async with await SQLiteJournal.open(journal) as store:
            counts = await store.counts()
            assert counts[JobState.ORDERING] == counts[JobState.UNKNOWN] == 0
            assert counts[JobState.DONE] < 60

        resumed = await start_cli(sandbox, journal, "--resume")
        assert await resumed.wait() == 0
        assert orders_created(sandbox) == {reference: 1 for reference in references()}


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="shipping-async")
    bulk.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bulk", *argv])
    code: int = args.handler(args)
    return code


def test_a_bad_row_is_reported_with_its_line_and_field_and_the_rest_ship(
    tmp_path: Path,
) -> None:
    rows = list(csv.DictReader(EXAMPLE.open(newline="")))[:4]
    rows[1]["package_weight"] = "-2"
    rows[2]["mass_unit"] = "stone"
    source = write_csv(tmp_path / "shipments.csv", rows)
    out = tmp_path / "results.jsonl"

    code = run_cli(str(source), "--sandbox", "--out", str(out), "--progress", "plain")

    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert code == 1
    bad = {r["key"]: r["error"] for r in results if r["stage"] == "input"}
    assert set(bad) == {rows[1]["customer_reference"], rows[2]["customer_reference"]}
    assert bad[rows[1]["customer_reference"]].startswith("line 3: field package_weight")
    assert bad[rows[2]["customer_reference"]].startswith("line 4: field mass_unit")
    assert sum(r["status"] == "done" for r in results) == 2


def test_an_existing_journal_is_not_reused_without_resume(tmp_path: Path) -> None:
    journal = tmp_path / "batch.journal"
    assert run_cli(str(EXAMPLE), "--sandbox", "--journal", str(journal), "--progress", "plain") == 0
    assert run_cli(str(EXAMPLE), "--sandbox", "--journal", str(journal)) == 2


@pytest.mark.parametrize(
    ("argv", "budget"),
    [
        pytest.param(["--sandbox"], (20, 1.0), id="sandbox-default-speed-60"),
        pytest.param(["--sandbox", "--sandbox-speed", "100"], (20, 0.6), id="sandbox-speed"),
        pytest.param(["--rate-limit", "50/60"], (50, 60.0), id="explicit"),
        pytest.param([], (20, 60.0), id="api-default"),
    ],
)
def test_the_rate_budget_follows_the_options(argv: list[str], budget: tuple[int, float]) -> None:
    parser = argparse.ArgumentParser()
    bulk.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bulk", "in.csv", *argv])
    plan = bulk._shared_plan(args)
    assert (plan.limit, plan.window_real) == pytest.approx(budget)


@pytest.mark.parametrize("command", ["bulk", "worker"])
@pytest.mark.parametrize(
    ("option", "value"),
    [
        pytest.param("--lease", "0", id="lease-zero"),
        pytest.param("--lease", "-5", id="lease-negative"),
        pytest.param("--timeout", "0", id="timeout-zero"),
        pytest.param("--timeout", "nan", id="timeout-nan"),
    ],
)
def test_a_lease_or_timeout_that_is_not_positive_is_refused_naming_the_option(
    command: str, option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from shipping_async.cli import main

    where = (
        [str(EXAMPLE), "--sandbox"]
        if command == "bulk"
        else ["--journal", "postgresql://127.0.0.1:1/none"]
    )

    code = main([command, *where, option, value])

    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"error: {option} must be a number of seconds > 0"), err
    assert "Traceback" not in err


# The process's own command line: main() with no arguments, an exit handler of its own.
_PROGRAM = (
    "import atexit, sys\n"
    "atexit.register(lambda: print('exit handler ran', flush=True))\n"
    "from shipping_async.cli import main\n"
    "sys.exit(main())\n"
)


def test_a_run_ends_its_process_with_every_line_written_and_the_exit_handlers_run(
    tmp_path: Path,
) -> None:
    """bulk and worker end their process without tearing the interpreter down: what they
    wrote is all there, the exit code is the run's, and exit handlers still run."""
    import subprocess

    rows = list(csv.DictReader(EXAMPLE.open(newline="")))[:3]
    rows[2]["mass_unit"] = "stone"  # a failed row: exit code 1, not 0
    source = write_csv(tmp_path / "shipments.csv", rows)
    out = tmp_path / "results.jsonl"
    argv = ["bulk", str(source), "--sandbox", "--sandbox-speed", "100", "--out", str(out)]

    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM, *argv, "--progress", "plain"],
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "exit handler ran"
    assert lines[-2].startswith("temporary journal: done 2"), lines
    assert len(out.read_text().splitlines()) == 3
