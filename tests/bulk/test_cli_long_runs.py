"""The CLI for long runs: the printed resume command works verbatim; the summary counts
input failures; a key used twice is refused naming both lines."""

from __future__ import annotations

import asyncio
import csv
import json
import os
import shlex
import signal
import sys
from pathlib import Path

import pytest

from shipping_async.cli import main
from shipping_async.sandbox import SandboxServer
from tests.bulk.support import orders_created, write_csv

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "shipments.csv"
SPEED = 100.0


def test_a_key_used_twice_names_both_lines_and_the_summary_counts_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = list(csv.DictReader(EXAMPLE.open(newline="")))[:3]
    rows.append(dict(rows[0]))  # line 5 repeats line 2's key
    rows[1]["package_weight"] = "-2"  # line 3: a bad field
    source = tmp_path / "shipments.csv"
    write_csv(source, rows)
    out = tmp_path / "results.jsonl"

    code = main(["bulk", str(source), "--sandbox", "--out", str(out), "--progress", "plain"])

    results = [json.loads(line) for line in out.read_text().splitlines()]
    twice = [r for r in results if r["stage"] == "input" and "twice" in r["error"]]
    printed = capsys.readouterr().out
    assert code == 1
    assert len(twice) == 1
    assert "lines 2 and 5" in twice[0]["error"]
    assert "invalid input 2" in printed  # the bad field and the repeated key
    assert sum(r["status"] == "done" for r in results) == 2


async def test_the_resume_command_printed_after_ctrl_c_works_verbatim(tmp_path: Path) -> None:
    journal = tmp_path / "my batch.journal"  # a space: the command must quote it
    out = tmp_path / "results.jsonl"
    env = {**os.environ}
    async with SandboxServer(speed=SPEED, seed=41) as sandbox:
        env["SHIPPING_ACCESS_TOKEN"] = sandbox.token
        argv = ["bulk", str(EXAMPLE), "--base-url", sandbox.base_url, "--sandbox-speed",
                f"{SPEED:g}", "--journal", str(journal), "--out", str(out),
                "--progress", "plain", "--choose", "cheapest"]  # fmt: skip
        first = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "shipping_async", *argv, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        assert first.stdout is not None
        async with asyncio.timeout(30):
            while b"done PO-" not in await first.stdout.readline():
                pass
        first.send_signal(signal.SIGINT)
        output = (await first.stdout.read()).decode()
        assert await first.wait() == 130
        printed = [line for line in output.splitlines() if "to continue: " in line]
        command = shlex.split(printed[-1].split("to continue: ", 1)[1])

        assert command[0] == "shipping-async"
        assert command[1:-1] == argv  # every flag kept, in order
        assert command[-1] == "--resume"
        resumed = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "shipping_async", *command[1:], env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        assert await asyncio.wait_for(resumed.wait(), 60) == 0
        created = orders_created(sandbox)
    assert len(created) == 60
    assert set(created.values()) == {1}
