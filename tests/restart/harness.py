"""Kill/resume cycles of ``shipping-async bulk`` as a user runs it, judged by the sandbox.

One *cycle* ships the example batch against a fresh sandbox (in this process, on a scaled
clock): ``shipping-async bulk examples/shipments.csv --base-url URL --journal J --out R
--rate-limit N/S`` runs as a real process and is SIGKILLed at seeded random moments, then
started again with ``--resume``, until a run ends on its own. Kill moments are of these
kinds:

- ``random``: anywhere in the run's first two windows after its first request;
- ``early``: within one window after the restarted run's first POST /orders;
- ``pause``: inside a 429 pause (the sandbox answers one POST /orders 429, like a full
  window, and the process is killed while its limiter waits the pause out);
- ``burst`` (in a fixed plan only): just after the run's first half window of orders
  was created, so that the next run starts while the server's window is still full.

Everything is judged from the sandbox's request log, never from our journal: orders
created per ``customer_reference``, 429s and when they came, and for every job the last
run reports ``unknown``, whether its request was on the wire when its process died: its
last POST /orders reached the server (answered other than 429, or not answered at all)
and nothing after it used the answer (no later request names the order it created).
Used by ``tests/restart`` (few cycles) and ``benchmarks/kill_resume.py`` (20).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from shipping_async.bulk.readers import read_jobs
from shipping_async.limiter import DEFAULT_MARGIN_SHARE
from shipping_async.sandbox import SandboxServer
from shipping_async.sandbox._log import RequestRecord

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "shipments.csv"
KINDS = ("random", "early", "pause")  # drawn for seeded cycles by default
WINDOW = 60.0  # the API's window, sandbox seconds
LIMIT = 20
LEASE = 1.5  # real seconds a killed run's claims stay its own
RUN_LIMIT = 60.0  # real seconds one uninterrupted run may take before the cycle fails


@dataclass
class Cycle:
    """What one cycle did and what the sandbox saw."""

    seed: int
    jobs: int
    kills: list[str] = field(default_factory=list)  # the kinds actually carried out
    exit_codes: list[int] = field(default_factory=list)
    created: Counter[str] = field(default_factory=Counter)  # orders per reference
    statuses: dict[str, str] = field(default_factory=dict)  # the last run's report
    unknown: list[str] = field(default_factory=list)
    unknown_never_created: list[str] = field(default_factory=list)
    # Unknown, but the log shows no request of theirs on the wire unanswered-for: the kill
    # fell between the intent and the first byte, or the job waited with its intent.
    unknown_not_on_wire: list[str] = field(default_factory=list)
    restart_429s: int = 0  # organic 429s within window + margin of a restarted run's start
    other_429s: int = 0  # organic 429s elsewhere
    injected_429s: int = 0  # the sandbox's own fault answers (the 'pause' kills)
    seconds: float = 0.0  # real, every run of the cycle incl. process start-up
    bound: float = 0.0  # real, the least time the batch's orders can take
    busiest_window: int = 0

    @property
    def duplicates(self) -> int:
        return sum(count - 1 for count in self.created.values() if count > 1)

    @property
    def lost(self) -> list[str]:
        """Jobs with no order at the server that the last run does not report unknown."""
        return [
            key
            for key, status in self.statuses.items()
            if self.created[key] == 0 and status != "unknown"
        ] + [key for key in self.created if key not in self.statuses]


def batch_keys() -> list[str]:
    return [getattr(item, "key", "") for item in read_jobs(str(EXAMPLE))]


def bulk_argv(
    base_url: str, journal: str, out: Path, *, speed: float, limiter: str | None, resume: bool
) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "shipping_async",
        "bulk",
        str(EXAMPLE),
        "--base-url",
        base_url,
        "--journal",
        journal,
        "--out",
        str(out),
        "--rate-limit",
        f"{LIMIT}/{WINDOW / speed:g}",
        "--sandbox-speed",
        f"{speed:g}",
        "--progress",
        "plain",
        "--timeout",
        "2",
        # Real seconds: a killed run's jobs come back to the next run after this.
        "--lease",
        f"{LEASE:g}",
    ]
    if limiter:
        argv += ["--limiter", limiter]
    if resume:
        argv.append("--resume")
    return argv


class _Runner:
    def __init__(
        self,
        sandbox: SandboxServer,
        folder: Path,
        *,
        journal: str,
        limiter: str | None,
        speed: float,
        rng: random.Random,
    ) -> None:
        self.sandbox = sandbox
        self.folder = folder
        self.journal = journal
        self.limiter = limiter
        self.speed = speed
        self.rng = rng
        self.window_real = WINDOW / speed
        self.runs = 0
        self.starts: list[int] = []  # log length when each run started
        self.kill_times: list[float] = []  # wall-clock time of each SIGKILL
        self.env = {**os.environ, "SHIPPING_ACCESS_TOKEN": sandbox.token}

    def log(self) -> list[RequestRecord]:
        return self.sandbox.control.requests()

    def start(self) -> subprocess.Popen[bytes]:
        self.starts.append(len(self.log()))
        out = self.folder / f"results{self.runs}.jsonl"
        argv = bulk_argv(
            self.sandbox.base_url,
            self.journal,
            out,
            speed=self.speed,
            limiter=self.limiter,
            resume=self.runs > 0,
        )
        with (
            (self.folder / f"run{self.runs}.out").open("wb") as stdout,
            (self.folder / f"run{self.runs}.err").open("wb") as stderr,
        ):
            process = subprocess.Popen(argv, stdout=stdout, stderr=stderr, env=self.env)
        self.runs += 1
        return process

    async def kill_at(self, process: subprocess.Popen[bytes], kind: str) -> bool:
        """Kill ``process`` at a moment of ``kind``; False if it ended first."""
        since = self.starts[-1]
        if kind == "pause":
            message = f"{LIMIT} of {LIMIT} in {self.window_real:g} seconds"
            self.sandbox.control.add_fault(
                "status", "/orders", method="POST", status=429, message=message
            )
            seen = await self._until(process, lambda: self._injected_since(since))
            delay = self.rng.uniform(0, self.window_real * (1 + DEFAULT_MARGIN_SHARE))
        elif kind == "burst":
            seen = await self._until(process, lambda: self._created_since(since) >= LIMIT // 2)
            delay = self.rng.uniform(0, self.window_real / 10)
        else:
            seen = await self._until(
                process, lambda: self._first_since(since, orders=kind == "early")
            )
            span = self.window_real if kind == "early" else 2 * self.window_real
            delay = self.rng.uniform(0, span)
        if not seen:
            self.sandbox.control.clear_faults()
            return False
        await asyncio.sleep(delay)
        self.sandbox.control.clear_faults()
        if process.poll() is not None:
            return False
        self.kill_times.append(time.time())
        process.send_signal(signal.SIGKILL)
        await asyncio.to_thread(process.wait)
        await asyncio.sleep(0.05)  # the server finishes the dead process's requests
        return True

    def _first_since(self, since: int, *, orders: bool) -> bool:
        return any(
            not orders or (record.method == "POST" and record.path == "/orders")
            for record in self.log()[since:]
        )

    def _created_since(self, since: int) -> int:
        return sum(1 for record in self.log()[since:] if record.order_id is not None)

    def _injected_since(self, since: int) -> bool:
        return any(record.status == 429 and record.fault for record in self.log()[since:])

    async def _until(self, process: subprocess.Popen[bytes], seen: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + RUN_LIMIT
        while time.monotonic() < deadline:
            if seen():
                return True
            if process.poll() is not None:
                return False
            await asyncio.sleep(0.002)
        return False

    async def finish(self, process: subprocess.Popen[bytes]) -> int:
        try:
            async with asyncio.timeout(RUN_LIMIT):
                return await asyncio.to_thread(process.wait)
        except TimeoutError:
            process.kill()
            await asyncio.to_thread(process.wait)
            raise AssertionError(f"run {self.runs - 1} did not end:\n{self.logs()}") from None

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
            for path in sorted(self.folder.glob("run*"))
        )


async def run_cycle(
    seed: int,
    folder: Path,
    *,
    journal: str | None = None,
    limiter: str | None = None,
    kills: int = 3,
    kinds: Sequence[str] = KINDS,
    plan: Sequence[str] | None = None,
    speed: float = 60.0,
) -> Cycle:
    """Ship the example batch, killing its runs ``kills`` times; judge by the sandbox.

    The kinds of kill (``kinds``, :data:`KINDS` unless told) are drawn from ``seed``, or
    follow ``plan``; a run that ends before its kill ends the cycle.
    """
    rng = random.Random(seed)
    keys = batch_keys()
    cycle = Cycle(seed=seed, jobs=len(keys))
    await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
    journal = journal or str(folder / "batch.journal")
    started = time.monotonic()
    async with SandboxServer(speed=speed, seed=seed) as sandbox:
        runner = _Runner(sandbox, folder, journal=journal, limiter=limiter, speed=speed, rng=rng)
        drawn = [rng.choice(kinds) for _ in range(kills)]
        kinds = list(plan) if plan is not None else drawn
        for kind in kinds:
            process = runner.start()
            if await runner.kill_at(process, kind):
                cycle.kills.append(kind)
                continue
            cycle.exit_codes.append(await runner.finish(process))
            break
        else:
            cycle.exit_codes.append(await runner.finish(runner.start()))
        cycle.seconds = time.monotonic() - started
        log = runner.log()
        # For a post-mortem: the sandbox's view, and where each run started in it.
        await asyncio.to_thread(
            (folder / "sandbox-log.jsonl").write_bytes,
            b"\n".join(msgspec.json.encode(record) for record in log),
        )
        notes = f"starts={runner.starts!r}\nkills={runner.kill_times!r}\n"
        await asyncio.to_thread((folder / "runs.txt").write_text, notes)
        last = runner.folder / f"results{runner.runs - 1}.jsonl"
        judge(cycle, log, runner.starts, last, keys, speed=speed)
        if cycle.exit_codes[-1] not in (0, 1):
            raise AssertionError(f"the last run exited {cycle.exit_codes[-1]}:\n{runner.logs()}")
    return cycle


def judge(
    cycle: Cycle,
    log: list[RequestRecord],
    starts: list[int],
    results: Path,
    keys: list[str],
    *,
    speed: float,
) -> None:
    """Fill ``cycle`` from the sandbox's request log and the last run's report."""
    orders = [
        (index, record)
        for index, record in enumerate(log)
        if record.method == "POST" and record.path == "/orders"
    ]
    cycle.created = Counter({key: 0 for key in keys})
    cycle.created.update(
        record.customer_reference or "" for _, record in orders if record.order_id is not None
    )
    decoder = msgspec.json.Decoder(dict[str, object])
    for line in results.read_bytes().splitlines():
        if line.strip():
            row = decoder.decode(line)
            cycle.statuses[str(row["key"])] = str(row["status"])
    cycle.unknown = sorted(key for key, status in cycle.statuses.items() if status == "unknown")
    cycle.unknown_never_created = [key for key in cycle.unknown if cycle.created[key] == 0]
    cycle.unknown_not_on_wire = [key for key in cycle.unknown if not on_the_wire(key, log)]
    # A restarted run's first window + margin, on the sandbox clock, from its first request.
    hold = WINDOW * (1 + DEFAULT_MARGIN_SHARE)
    restart_windows = []
    for start in starts[1:]:
        if start < len(log):
            restart_windows.append(log[start].monotonic)
    for _, record in orders:
        if record.status != 429:
            continue
        if record.fault:
            cycle.injected_429s += 1
        elif any(begin <= record.monotonic <= begin + hold for begin in restart_windows):
            cycle.restart_429s += 1
        else:
            cycle.other_429s += 1
    times = sorted(record.monotonic for _, record in orders if record.order_id is not None)
    cycle.busiest_window = max(
        (sum(1 for t in times[i:] if t < start + WINDOW) for i, start in enumerate(times)),
        default=0,
    )
    cycle.bound = (-(-len(keys) // LIMIT) - 1) * WINDOW / speed


def on_the_wire(key: str, log: list[RequestRecord]) -> bool:
    """Whether ``key``'s order request was on the wire, its answer never recorded.

    From the log alone: the last POST /orders for ``key`` reached the server (answered
    other than 429, which proves nothing was created, or not answered at all), and no
    later request names the order it created (a run that recorded the answer goes on
    to that order's waybill).
    """
    posts = [
        index
        for index, record in enumerate(log)
        if record.method == "POST" and record.path == "/orders"
        if record.customer_reference == key
    ]
    if not posts or log[posts[-1]].status == 429:
        return False
    order_id = log[posts[-1]].order_id
    if order_id is None:
        return True
    path = f"/orders/{order_id}"
    later = log[posts[-1] + 1 :]
    return not any(r.path == path or r.path.startswith(path + "/") for r in later)
