"""One worker process, many accounts: jobs/s against the bound, CPU and round trips per job.

Run: .venv/bin/python benchmarks/many_accounts.py [--accounts 10,50,200] [--jobs 600,2000,6000]
     [--speed 60] [--lease 10] [--only pg,sqlite,bulk]
Needs PostgreSQL on 127.0.0.1:5432 (user postgres) and ``redis-server`` on the PATH.

Every row starts one ``shipping-async sandbox`` process serving A accounts (``--tokens-file``,
one token and one 20-per-60 s order budget each, at ``--speed``) and then one worker process
on it, with one client per account (tokens from ``SHIPPING_ACCESS_TOKEN__<ACCOUNT>``):

- ``pg+redis``: the jobs are enqueued first into a fresh schema of the database
  ``shipping_bench`` (its own, so that ``pg_stat_database`` counts only this run), then one
  ``shipping-async worker --journal postgresql://... --limiter redis://...`` drains it; the
  Redis is a private ``redis-server`` on a free port (so ``INFO commandstats`` counts only
  this run).
- ``sqlite+memory``: the same with a SQLite journal file and the in-process limiter.
- ``bulk 1 acct``: ``shipping-async bulk CSV --journal FILE`` on one account, the limit
  lifted on both sides, so the figure is the pipeline's own cost (reading the CSV and
  enqueueing included).

Columns: ``jobs/s`` = jobs / (first to last request the sandbox saw, real seconds);
``bound`` = accounts x 20 per 60 sandbox seconds, in jobs/s; ``CPU ms/job`` of the worker
process alone (``wait4`` rusage); ``raw jobs`` = that CPU in units of this machine's
yardstick, the CPU of a job's five requests through plain aiohttp + msgspec
(``request_cost.py``'s raw side, measured before the first row and again after the last:
one session's machine measures the same code up to twice as slow as another's, and
this column moves less; ``--no-yardstick`` skips it); ``peak RSS`` its own high-water mark (``VmHWM``, read from
``/proc`` while it runs: ``ru_maxrss`` is no good here, see :class:`PeakWatch`); ``PG xact/job`` = committed + rolled back
transactions of the run's database; ``Redis cmd/job`` and ``scripts/order`` from
``INFO commandstats``; ``req/job`` = API requests the sandbox saw per job; ``lease fail`` =
worker log lines saying a lease could not be renewed or was lost; ``429``, ``expired``
(POST /orders refused because the estimate had expired) and ``dup`` (references ordered
more than once) from the sandbox's own request log; ``done`` from the journal. The CPU
split (user + system seconds) is printed on stderr under each row.

Everything runs this script's checkout: the sandbox and the workers run with its root as
their ``cwd`` (``python -m`` puts the working directory first on ``sys.path``: run from
another checkout, the script measured that one's code), and this process (which fills
and reads the journals) imports from it first. The workers run with a bytecode cache
(``PYTHONPYCACHEPREFIX`` in the temp folder, filled before the first row), as a deployed
worker does: a shell with ``PYTHONDONTWRITEBYTECODE`` would otherwise have every worker
compile each module it imports (~0.25 s of CPU). ``BENCH_PROFILE=/path.prof`` runs the worker
under cProfile; ``BENCH_PYSPY=/path.txt`` runs the measured process (worker or bulk) under
``py-spy record --format raw`` (collapsed stacks; its CPU figures then include py-spy's own).

``--baseline REF`` measures another commit side by side: each row is run twice in turn, once
with this checkout's worker and once with REF's (extracted with ``git archive`` into a temp
folder; it fills and reads its journal with its own code), against the same sandbox build,
and a last table gives each row's CPU per job as a ratio to REF's. A CPU point stated in
milliseconds for one machine (issue 18: the worker <= 1.5 ms from 2.8-5.0, ``bulk`` <= 1.0
from 1.5-1.9) becomes a ratio to the code it started from, which any machine can measure:
``--baseline 62238e3`` is that code.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis
from _bench_stores import (  # this folder is first on sys.path
    BENCH_DSN,
    account_name,
    drop_schema,
    ensure_database,
    private_redis,
    transactions,
    write_batch,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's shipping_async, whatever the venv installed
LIMIT, WINDOW = 20, 60.0
PROFILE = (
    ["-m", "cProfile", "-o", os.environ["BENCH_PROFILE"]] if os.environ.get("BENCH_PROFILE") else []
)
PYSPY = (
    [
        "py-spy",
        "record",
        "--format",
        "raw",
        "--rate",
        os.environ.get("BENCH_PYSPY_RATE", "250"),
        "--gil",
        "--nonblocking",
        "-o",
        os.environ["BENCH_PYSPY"],
        "--",
    ]
    if os.environ.get("BENCH_PYSPY")
    else []
)
PYCACHE = Path(tempfile.gettempdir()) / "shipping-async-bench-pycache"
LEASE_WORDS = ("could not be renewed", "lease lost")


@dataclass
class Row:
    """What one run measured."""

    label: str
    accounts: int
    jobs: int
    bound: float
    seconds: float = 0.0
    cpu_ms: float = 0.0
    rss_mib: float = 0.0
    xacts: float | None = None
    redis_calls: float | None = None
    scripts: float | None = None
    requests: float = 0.0
    lease_failures: int = 0
    too_many: int = 0
    expired: int = 0
    duplicates: int = 0
    done: int = 0
    code: int = 0
    crashes: int = 0
    notes: list[str] = field(default_factory=list)


def token_env(account: str) -> str:
    return "SHIPPING_ACCESS_TOKEN__" + account.upper().replace("-", "_")


@contextlib.contextmanager
def sandbox_process(
    folder: Path, accounts: int, speed: float, rate_limit: int
) -> Iterator[tuple[str, dict[str, str]]]:
    """A sandbox in its own process; yields its base URL and account -> token."""
    tokens = {account_name(i): f"tok-{uuid.uuid4().hex}" for i in range(accounts)}
    tokens_file = folder / "tokens.txt"
    tokens_file.write_text("".join(f"{name} {token}\n" for name, token in tokens.items()))
    command = [sys.executable, "-m", "shipping_async", "sandbox", "--port", "0"]
    command += ["--tokens-file", str(tokens_file), "--speed", str(speed)]
    command += ["--rate-limit", str(rate_limit)]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("Sandbox listening on "):
            raise SystemExit(f"the sandbox did not start: {line!r}")
        yield line.split()[-1], tokens
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class PeakWatch:
    """The peak RSS of a child process: its ``VmHWM``, read every few milliseconds.

    Not ``ru_maxrss``: the child is started with ``vfork`` + ``exec``, and Linux keeps the
    larger of the old address space's high-water mark (this benchmark's own, up to
    170 MiB once it has read a sandbox's request log) and the new one's. Measured so, a
    200-account SQLite worker "peaked" anywhere between 80 and 170 MiB from run to run,
    as this process happened to, while its own peak stayed at about 60 MiB. ``VmHWM``
    belongs to the program the child runs (an ``exec`` starts it afresh) and only grows,
    so the last reading misses at most the last few milliseconds before the exit. Under
    ``BENCH_PYSPY`` the measured process is py-spy's child: that one is watched.
    """

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._stop = threading.Event()
        self.kib = 0
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _target(self) -> int | None:
        if not PYSPY:
            return self._pid
        try:
            children = Path(f"/proc/{self._pid}/task/{self._pid}/children").read_text().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def _watch(self) -> None:
        pid = None
        while not self._stop.is_set():
            pid = pid or self._target()
            if pid is not None:
                with contextlib.suppress(OSError):
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            self.kib = max(self.kib, int(line.split()[1]))
            self._stop.wait(0.005)

    def stop(self) -> int:
        """Stop watching; the peak in KiB (0 when it could not be read)."""
        self._stop.set()
        self._thread.join()
        return self.kib


def run_measured(
    command: list[str], env: dict[str, str], log: Path, code: Path = ROOT
) -> tuple[int, Any, float, int]:
    """Run ``command`` in ``code`` to its end; its exit code, rusage, wall seconds and peak
    RSS (KiB)."""
    started = time.monotonic()
    command = [*PYSPY, *command]
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, env=env, stdout=output, stderr=subprocess.STDOUT, cwd=code
        )
        watch = PeakWatch(process.pid)
        _, status, usage = os.wait4(process.pid, 0)
        peak = watch.stop()
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, usage, time.monotonic() - started, peak


async def judge(row: Row, base_url: str, token: str, speed: float) -> None:
    """Throughput, requests, 429s, expired estimates and duplicates from the sandbox's log."""
    root = base_url.removesuffix("/client_api/v2")
    headers = {"Authorization": f"Bearer {token}"}
    timeout = aiohttp.ClientTimeout(total=120)
    async with (
        aiohttp.ClientSession(timeout=timeout, headers=headers) as session,
        session.get(f"{root}/_sandbox/requests") as reply,
    ):
        records: list[dict[str, Any]] = (await reply.json())["requests"]
    moments = [r["monotonic"] for r in records]
    row.seconds = (max(moments) - min(moments)) / speed if moments else 0.0
    row.requests = len(records) / row.jobs
    orders = [r for r in records if r["method"] == "POST" and r["path"] == "/orders"]
    row.too_many = sum(1 for r in orders if r["status"] == 429)
    row.expired = sum(1 for r in orders if "expired" in (r.get("detail") or ""))
    made = Counter(r["customer_reference"] for r in orders if r["order_id"] is not None)
    row.duplicates = sum(count - 1 for count in made.values() if count > 1)


def read_log(row: Row, log: Path) -> None:
    text = log.read_text(errors="replace")
    row.lease_failures = sum(text.count(words) for words in LEASE_WORDS)
    row.crashes = text.count("Traceback") + (1 if row.code not in (0, 1) else 0)
    lines = [line for line in text.splitlines() if "error" in line.lower()]
    row.notes += lines[:2]


def worker_env(base_url: str, tokens: dict[str, str], code: Path = ROOT) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIPPING_")}
    env["SHIPPING_BASE_URL"] = base_url
    env.update({token_env(name): token for name, token in tokens.items()})
    env["PYTHONPATH"] = str(code)
    # A deployed worker runs compiled bytecode (pip writes it on install); a shell with
    # PYTHONDONTWRITEBYTECODE would have the worker compile every module it imports on
    # every start, ~0.25 s of CPU counted against its jobs. So the workers share a cache.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return env


def warm_bytecode(code: Path = ROOT) -> None:
    """Compile what a worker imports into the shared cache, before anything is measured."""
    modules = "shipping_async.cli._run, shipping_async.scaleout.postgres_journal, "
    modules += "shipping_async.scaleout.redis_limiter, shipping_async.bulk.sqlite_journal"
    if code != ROOT:  # an older checkout: what its ``__main__`` imports
        modules = "shipping_async.cli, shipping_async.scaleout.factory"
    command = [sys.executable, "-c", f"import {modules}"]
    subprocess.run(command, env=worker_env("", {}, code), check=True, cwd=code)


# Run by the checkout under test, in a process of its own (``sys.argv``: the journal spec,
# then the batch file to enqueue, if any): a baseline's journal has the schema of its own
# code. The same calls on this checkout and on 62238e3.
_JOURNAL_SCRIPT = """
import asyncio, sys
from shipping_async.bulk.journal import JobState
from shipping_async.bulk.readers import read_jobs
from shipping_async.scaleout.factory import open_journal

async def main(spec, batch=None):
    journal = await open_journal(spec)
    try:
        if batch is None:
            print((await journal.counts())[JobState.DONE])
            return
        jobs = [job for job in read_jobs(batch) if not hasattr(job, "error")]
        for start in range(0, len(jobs), 500):
            await journal.add(jobs[start : start + 500])
    finally:
        await journal.close()

asyncio.run(main(*sys.argv[1:]))
"""


def _journal_call(code: Path, *argv: str) -> str:
    command = [sys.executable, "-c", _JOURNAL_SCRIPT, *argv]
    env = worker_env("", {}, code)
    return subprocess.run(
        command, env=env, cwd=code, check=True, capture_output=True, text=True
    ).stdout


async def count_done(spec: str, code: Path = ROOT) -> int:
    output = await asyncio.to_thread(_journal_call, code, spec)
    return int(output.split()[-1])


async def enqueue(spec: str, batch: Path, code: Path = ROOT) -> None:
    await asyncio.to_thread(_journal_call, code, spec, str(batch))


@contextlib.contextmanager
def extracted(ref: str) -> Iterator[Path]:
    """The tree of commit ``ref`` of this repository, in a temp folder."""
    with tempfile.TemporaryDirectory(prefix="baseline-") as name:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", ref],
            check=True,
            capture_output=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(name, filter="data")
        yield Path(name)


async def measure_worker(
    label: str, accounts: int, jobs: int, args: argparse.Namespace, code: Path = ROOT
) -> Row:
    """One ``shipping-async worker`` of checkout ``code`` draining a journal filled beforehand."""
    row = Row(label, accounts, jobs, accounts * LIMIT * args.speed / WINDOW)
    postgres = label.startswith("pg")
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        spec = f"{BENCH_DSN}?schema={schema}" if postgres else str(folder / "journal.sqlite")
        batch = folder / "batch.csv"
        write_batch(batch, accounts, jobs, prefix="MA")
        with contextlib.ExitStack() as stack:
            base_url, tokens = stack.enter_context(
                sandbox_process(folder, accounts, args.speed, LIMIT)
            )
            redis_url = stack.enter_context(private_redis(folder)) if postgres else None
            await enqueue(spec, batch, code)
            redis = aioredis.Redis.from_url(redis_url) if redis_url else None
            if redis is not None:
                await redis.config_resetstat()
            before = await transactions() if postgres else 0
            command = [
                sys.executable,
                *PROFILE,
                "-m",
                "shipping_async",
                "worker",
                "--journal",
                spec,
            ]
            if redis_url:
                command += ["--limiter", redis_url]
            command += ["--sandbox-speed", str(args.speed), "--lease", lease(args, code)]
            command += ["--progress", "plain", *args.worker_args.split()]
            log = folder / "worker.log"
            env = worker_env(base_url, tokens, code)
            row.code, usage, _, peak = run_measured(command, env, log, code)
            if postgres:
                row.xacts = (await transactions() - before) / jobs
            if redis is not None:
                stats = await redis.info("commandstats")
                await redis.aclose()
                calls = {name: int(value["calls"]) for name, value in stats.items()}
                row.redis_calls = (sum(calls.values()) - calls.get("cmdstat_info", 0)) / jobs
                scripts = sum(v for k, v in calls.items() if "eval" in k or "fcall" in k)
                row.scripts = scripts / jobs
            _rusage(row, usage, peak)
            read_log(row, log)
            await judge(row, base_url, next(iter(tokens.values())), args.speed)
            row.done = await count_done(spec, code)
    if postgres:
        await drop_schema(schema)
    return row


async def measure_bulk(
    label: str,
    accounts: int,
    jobs: int,
    args: argparse.Namespace,
    *,
    lifted: bool,
    code: Path = ROOT,
) -> Row:
    rate_limit = 1_000_000 if lifted else LIMIT
    bound = float("nan") if lifted else accounts * LIMIT * args.speed / WINDOW
    row = Row(label, accounts, jobs, bound)
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        batch = folder / "batch.csv"
        write_batch(batch, accounts, jobs, prefix="MA")
        with sandbox_process(folder, accounts, args.speed, rate_limit) as (base_url, tokens):
            journal = folder / "journal.sqlite"
            command = [sys.executable, "-m", "shipping_async", "bulk", str(batch)]
            command += ["--journal", str(journal), "--base-url", base_url]
            command += ["--sandbox-speed", str(args.speed), "--lease", lease(args, code)]
            command += ["--progress", "plain"]
            if lifted:
                command += ["--rate-limit", f"{rate_limit}/1"]
            env = worker_env(base_url, tokens, code)
            if accounts == 1:
                env["SHIPPING_ACCESS_TOKEN"] = next(iter(tokens.values()))
            log = folder / "worker.log"
            row.code, usage, _, peak = run_measured(command, env, log, code)
            _rusage(row, usage, peak)
            read_log(row, log)
            await judge(row, base_url, next(iter(tokens.values())), args.speed)
            row.done = await count_done(str(journal), code)
    return row


def _rusage(row: Row, usage: Any, peak_kib: int) -> None:
    row.cpu_ms = (usage.ru_utime + usage.ru_stime) * 1000 / row.jobs
    row.notes.append(f"CPU user {usage.ru_utime:.2f} s + system {usage.ru_stime:.2f} s")
    # KiB on Linux. ru_maxrss only where /proc could not be read (see PeakWatch).
    row.rss_mib = (peak_kib or usage.ru_maxrss) / 1024


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None or value != value:  # None or NaN
        return "-"
    return f"{value:,.{digits}f}"


def measure_yardstick() -> float:
    """This machine's CPU for a job's five requests through plain aiohttp + msgspec, in
    microseconds (``request_cost.py``'s raw side, 1,000 requests x 2 rounds)."""
    command = [sys.executable, str(ROOT / "benchmarks" / "request_cost.py")]
    command += ["--requests", "1000", "--rounds", "2"]
    output = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT).stdout
    for line in output.splitlines():
        if line.startswith("a job "):
            return float(line.split()[2])
    raise SystemExit(f"request_cost.py printed no job line: {output[-500:]!r}")


def print_row(row: Row, yardstick_us: float | None) -> None:
    rate = row.jobs / row.seconds if row.seconds else 0.0
    ratio = rate / row.bound if row.bound == row.bound else float("nan")
    cells = [
        row.label,
        str(row.accounts),
        f"{row.done}/{row.jobs}",
        _fmt(rate, 0),
        _fmt(row.bound, 0),
        _fmt(ratio, 2),
        _fmt(row.cpu_ms, 2),
        _fmt(row.cpu_ms * 1000 / yardstick_us if yardstick_us else None, 2),
        _fmt(row.xacts),
        _fmt(row.redis_calls),
        _fmt(row.scripts, 2),
        _fmt(row.requests, 2),
        f"{row.rss_mib:.0f} MiB",
        str(row.lease_failures),
        str(row.too_many),
        str(row.expired),
        str(row.duplicates),
        f"{row.code}/{row.crashes}",
    ]
    print("| " + " | ".join(cells) + " |", flush=True)
    for note in row.notes:
        print(f"    {row.label} {row.accounts}: {note[:160]}", file=sys.stderr)


def lease(args: argparse.Namespace, code: Path) -> str:
    """The ``--lease`` of the worker of checkout ``code``."""
    if code != ROOT and args.baseline_lease is not None:
        return str(args.baseline_lease)
    return str(args.lease)


def print_against_baseline(
    ref: str, measured: dict[tuple[str, int], list[tuple[Row, ...]]]
) -> None:
    """Each row's CPU per job over the baseline's, the median of the turns and each turn."""
    print(f"\nCPU per job against {ref}, each row run in turn with it (median of the turns):")
    print(f"| run | accounts | this checkout ms | {ref} ms | ratio | ratio per turn | {ref} done |")
    print("|---|---:|---:|---:|---:|---|---:|")
    for (label, accounts), turns in measured.items():
        ours = statistics.median(row.cpu_ms for row, _ in turns)
        theirs = statistics.median(row.cpu_ms for _, row in turns)
        each = " ".join(_fmt(a.cpu_ms / b.cpu_ms if b.cpu_ms else None, 2) for a, b in turns)
        done = " ".join(f"{b.done}/{b.jobs}" for _, b in turns)
        cells = [label, str(accounts), _fmt(ours, 2), _fmt(theirs, 2)]
        cells += [_fmt(ours / theirs if theirs else None, 2), each, done]
        print("| " + " | ".join(cells) + " |", flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accounts", default="10,50,200", help="accounts per row")
    parser.add_argument("--jobs", default="600,2000,6000", help="jobs per row (same order)")
    parser.add_argument("--speed", type=float, default=60.0, help="sandbox clock speed")
    parser.add_argument("--lease", type=float, default=10.0, help="the worker's --lease")
    parser.add_argument("--bulk-jobs", type=int, default=2000, help="jobs of the bulk row")
    parser.add_argument("--only", default="pg,sqlite,bulk", help="which kinds of rows")
    parser.add_argument(
        "--no-yardstick",
        action="store_true",
        help="skip the raw aiohttp + msgspec job measured first (the raw jobs column)",
    )
    parser.add_argument(
        "--baseline",
        metavar="REF",
        help="also run every row with the code of commit REF, in turn (e.g. 62238e3)",
    )
    parser.add_argument(
        "--baseline-lease",
        type=float,
        help="the baseline worker's --lease (default: --lease; 62238e3 needs 600 to finish)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="run every row this many times")
    parser.add_argument(
        "--worker-args", default="", help="more options for the worker, e.g. '--max-in-flight 32'"
    )
    args = parser.parse_args()
    pairs = list(
        zip(
            (int(a) for a in args.accounts.split(",")),
            (int(n) for n in args.jobs.split(",")),
            strict=True,
        )
    )
    kinds = set(args.only.split(","))
    yardstick = None if args.no_yardstick else measure_yardstick()
    if yardstick is not None:
        print(f"yardstick: {yardstick:.0f} us per raw job (aiohttp + msgspec, request_cost.py)")
    print(
        f"sandbox speed {args.speed:g} (the 60 s window lasts {WINDOW / args.speed:g} s real), "
        f"--lease {args.lease:g}; one worker process per row; 2 cores shared with the "
        "sandbox, PostgreSQL and Redis"
    )
    print(
        "| run | accounts | done | jobs/s | bound | ratio | CPU ms/job | raw jobs | PG xact/job "
        "| Redis cmd/job | scripts/job | req/job | peak RSS | lease fail | 429 | expired "
        "| dup | exit/crash |"
    )
    print(
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    with contextlib.ExitStack() as stack:
        codes = [("", ROOT)]
        if args.baseline:
            codes.append((f" @{args.baseline}", stack.enter_context(extracted(args.baseline))))
        for _, code in codes:
            warm_bytecode(code)
        if "pg" in kinds:
            await ensure_database()
        measured: dict[tuple[str, int], list[tuple[Row, ...]]] = {}

        async def in_turn(measure: Any, label: str, *measure_args: Any, **options: Any) -> None:
            """The row of each checkout, this one first in even turns, the baseline in odd."""
            turns = measured.setdefault((label, measure_args[0]), [])
            rows = {}
            for suffix, code in codes if len(turns) % 2 == 0 else codes[::-1]:
                row = await measure(label + suffix, *measure_args, code=code, **options)
                print_row(row, yardstick)
                rows[code] = row
            turns.append(tuple(rows[code] for _, code in codes))

        for _ in range(args.rounds):
            for accounts, jobs in pairs:  # side by side: both stores at each size
                if "pg" in kinds:
                    await in_turn(measure_worker, "pg+redis", accounts, jobs, args)
                if "sqlite" in kinds:
                    await in_turn(measure_worker, "sqlite+memory", accounts, jobs, args)
            if "bulk" in kinds:
                await in_turn(measure_bulk, "bulk 1 acct", 1, args.bulk_jobs, args, lifted=True)
    if args.baseline:
        print_against_baseline(args.baseline, measured)
    if yardstick is not None:
        print(f"yardstick at the end: {measure_yardstick():.0f} us per raw job", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
