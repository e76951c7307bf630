"""``bulk`` with --metrics-port: the port it reports, /metrics while it lingers, bad options."""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import re
import socket
import sys
from pathlib import Path

import pytest

from shipping_async.cli import bulk
from shipping_async.telemetry.logs import KEYS

from .scrape import scrape, value

EXAMPLE = Path(__file__).parents[2] / "examples" / "shipments.csv"


def run_bulk(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="shipping-async")
    bulk.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bulk", *argv])
    code: int = args.handler(args)
    return code


def references(folder: Path, rows: int) -> list[str]:
    with (folder / "shipments.csv").open(newline="") as file:
        return [row["customer_reference"] for row in csv.DictReader(file)][:rows]


def small_input(folder: Path, rows: int = 4) -> Path:
    lines = list(csv.DictReader(EXAMPLE.open(newline="")))[:rows]
    source = folder / "shipments.csv"
    with source.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(lines[0]))
        writer.writeheader()
        writer.writerows(lines)
    return source


async def test_bulk_reports_its_metrics_port_and_serves_the_final_counts(
    tmp_path: Path,
) -> None:
    source, out = small_input(tmp_path), tmp_path / "results.jsonl"
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "shipping_async", "bulk", str(source), "--sandbox"),
        *("--out", str(out), "--progress", "plain"),
        *("--metrics-port", "0", "--metrics-linger", "30"),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "SHIPPING_LOG_FORMAT": "json"},
    )
    assert process.stderr is not None
    try:
        err = ""
        async with asyncio.timeout(60):
            while "the run is over" not in err:
                line = (await process.stderr.readline()).decode()
                assert line, f"bulk ended early: {err}"
                err += line
        samples = await scrape(int(re.findall(r"127\.0\.0\.1:(\d+)/metrics", err)[0]))
    finally:
        process.kill()
        await process.wait()

    done = [r for r in map(json.loads, out.read_text().splitlines()) if r["status"] == "done"]
    assert len(done) == 4
    assert value(samples, "shipping_async_orders_created_total", account="") == 4
    assert value(samples, "shipping_async_jobs", account="*", state="done") == 4
    created = {"account": "", "operation": "create_order", "status_class": "2xx"}
    assert value(samples, "shipping_async_requests_total", **created) == 4


def test_a_metrics_port_in_use_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = run_bulk(str(small_input(tmp_path)), "--sandbox", "--metrics-port", str(port))
    assert code == 2
    err = capsys.readouterr().err
    assert f"error: --metrics-port {port}:" in err
    assert "Traceback" not in err


def test_a_bad_metrics_port_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_bulk(str(small_input(tmp_path)), "--sandbox", "--metrics-port", "70000") == 2
    assert "--metrics-port: expected 0-65535" in capsys.readouterr().err


async def test_bulk_json_log_lines_parse_each_written_once(tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "shipping_async", "bulk", str(small_input(tmp_path, rows=2))),
        *("--sandbox", "--progress", "plain"),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "SHIPPING_LOG_FORMAT": "json", "SHIPPING_LOG": "debug"},
    )
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()

    lines = err.decode().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) >= 2 * 5 * 2  # five calls a job, a line before and after each
    assert all(tuple(record) == KEYS for record in records)
    assert len(set(lines)) == len(lines), "a line was written twice"
    assert {r["job_key"] for r in records} == set(references(tmp_path, 2))
    assert "Bearer ***" in err.decode()
