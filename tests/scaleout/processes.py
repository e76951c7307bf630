"""Real processes for the scale-out tests: a sandbox and workers, as an operator starts them."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from shipping_async.cli import _COMMAND_MODULES

SPEED = 60.0  # the API's 60 s window lasts 1 real second
WINDOW = 60.0  # seconds of the sandbox clock
LIMIT = 20

# The scale-out commands run through ``python -m shipping_async`` once registered; until
# then through the same register()/handler the CLI calls.
_RUNNER = (
    "import argparse, sys\n"
    "from shipping_async.cli import journal, status, worker\n"
    "parser = argparse.ArgumentParser(prog='shipping-async')\n"
    "commands = parser.add_subparsers(dest='command', required=True)\n"
    "for module in (worker, status, journal):\n"
    "    module.register(commands)\n"
    "args = parser.parse_args()\n"
    "sys.exit(args.handler(args))\n"
)


# ``shipping-async ARGS`` with the heartbeat's lease renewals slowed by $RENEW_DELAY real
# seconds (an overloaded database), so that leases lapse between renewals (the heartbeat
# may call through wrappers such as the outage guard: any caller up the stack counts). The renewal a
# task makes just before a waybill or pickup request stays fast: were it slower than a
# whole lease, no job could ever get from one renewal to its request.
_SLOW_RENEWALS = (
    "import asyncio, os, sys\n"
    "from shipping_async.scaleout.postgres_journal import PostgresJournal\n"
    "delay = float(os.environ['RENEW_DELAY'])\n"
    "renew = PostgresJournal.renew\n"
    "async def slow(self, claims, *, lease):\n"
    "    frame = sys._getframe(1)\n"
    "    while frame is not None and 'heartbeat' not in frame.f_code.co_name:\n"
    "        frame = frame.f_back\n"
    "    if frame is not None:\n"
    "        await asyncio.sleep(delay)\n"
    "    return await renew(self, claims, lease=lease)\n"
    "PostgresJournal.renew = slow\n"
    "from shipping_async.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def slow_renewals_cli(*args: str) -> list[str]:
    """The argv of ``shipping-async ARGS`` whose journal renews leases slowly ($RENEW_DELAY)."""
    return [sys.executable, "-c", _SLOW_RENEWALS, *args]


def cli(*args: str) -> list[str]:
    """The argv that runs ``shipping-async ARGS``."""
    if args[0] in _COMMAND_MODULES:
        return [sys.executable, "-m", "shipping_async", *args]
    return [sys.executable, "-c", _RUNNER, *args]


@dataclass
class Sandbox:
    """A ``shipping-async sandbox`` process."""

    process: subprocess.Popen[str]
    base_url: str
    token: str

    @property
    def root(self) -> str:
        return self.base_url.removesuffix("/client_api/v2")

    async def wait_for_orders(self, count: int, within: float = 20.0) -> None:
        """Until the sandbox has created ``count`` orders (the batch is under way)."""
        async with asyncio.timeout(within):
            while True:
                if len(created(await self.orders())) >= count:
                    return
                await asyncio.sleep(0.02)

    async def orders(self) -> list[dict[str, Any]]:
        """The request log's POST /orders records, in arrival order."""
        return await self.requests(method="POST", path="/orders")

    async def requests(self, **query: str) -> list[dict[str, Any]]:
        """The request log (``method=``, ``path=`` filter it), in arrival order."""
        headers = {"Authorization": f"Bearer {self.token}"}
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{self.root}/_sandbox/requests", params=query, headers=headers) as got,
        ):
            body = await got.json()
        records: list[dict[str, Any]] = body["requests"]
        return records

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_sandbox(token: str, *, tokens_file: Path | None = None) -> Sandbox:
    """A sandbox process accepting ``token`` (or the accounts of ``tokens_file``, whose
    first token is ``token``)."""
    accounts = ("--tokens-file", str(tokens_file)) if tokens_file else ("--token", token)
    process = subprocess.Popen(
        cli("sandbox", "--port", "0", *accounts, "--speed", str(SPEED)),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("Sandbox listening on "):
        process.kill()
        raise RuntimeError(f"the sandbox did not start: {line!r}")
    return Sandbox(process, line.split()[-1], token)


@dataclass
class Workers:
    """``shipping-async worker`` processes, their output in files."""

    journal: str
    limiter: str
    env: dict[str, str]
    folder: Path
    extra: tuple[str, ...] = ()
    lease: float = 2.0  # real seconds: a killed worker's jobs are taken over 2 s later
    argv: Callable[..., list[str]] = cli
    #: Each worker serves a webhook of its own and settles unknown orders from evidence.
    webhooks: bool = False
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, count: int = 1, *, command: tuple[str, ...] = ("worker",)) -> None:
        """Start ``count`` workers (or, with ``command=("bulk", INPUT)``, bulk runs)."""
        for _ in range(count):
            index = len(self.processes)
            argv = self.argv(
                *command,
                "--journal",
                self.journal,
                "--limiter",
                self.limiter,
                "--sandbox-speed",
                str(SPEED),
                "--lease",
                str(self.lease),
                "--timeout",
                "2",
                "--progress",
                "plain",
                # By age, not GET /quotes: one round trip less between permit and order.
                "--estimate-validity",
                "600",
                *self.extra,
                *(_webhook_options() if self.webhooks else ()),
            )
            with (
                (self.folder / f"worker{index}.out").open("wb") as out,
                (self.folder / f"worker{index}.err").open("wb") as err,
            ):
                self.processes.append(
                    subprocess.Popen(argv, stdout=out, stderr=err, env={**os.environ, **self.env})
                )

    async def logged(self, text: str, within: float = 20.0, *, out: bool = False) -> None:
        """Until every worker started has written ``text`` to its stderr (``out``: its
        stdout), say a line it prints once its journal is open; fails if one exits first."""
        async with asyncio.timeout(within):
            for index, process in enumerate(self.processes):
                path = self.folder / f"worker{index}.{'out' if out else 'err'}"
                while text not in path.read_text(errors="replace"):
                    if process.poll() is not None:
                        raise AssertionError(f"worker{index} exited early:\n{self.logs()}")
                    await asyncio.sleep(0.02)

    def kill(self, index: int) -> None:
        self.processes[index].send_signal(signal.SIGKILL)
        self.processes[index].wait()

    async def wait(self, within: float) -> list[int]:
        """Every worker's exit code; fails the test if one runs longer than ``within``."""
        waits = [asyncio.to_thread(process.wait) for process in self.processes]
        try:
            async with asyncio.timeout(within):
                return await asyncio.gather(*waits)
        except TimeoutError:
            self.stop()  # which also ends the waiting threads
            raise AssertionError(
                f"workers still running after {within} s:\n{self.logs()}"
            ) from None

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
            for path in sorted(self.folder.glob("worker*"))
        )

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def _webhook_options() -> tuple[str, ...]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return (
        "--webhook-listen",
        f"127.0.0.1:{port}",
        "--webhook-url",
        f"http://127.0.0.1:{port}/hook",
    )


def created(orders: list[dict[str, Any]]) -> Counter[str]:
    """Orders created per customer_reference."""
    return Counter(record["customer_reference"] for record in orders if record["order_id"])


def busiest_window(orders: list[dict[str, Any]], window: float = WINDOW) -> int:
    """The most order creations the sandbox saw within any ``window`` (its clock)."""
    times = sorted(record["monotonic"] for record in orders if record["order_id"])
    return max(
        (bisect_right(times, start + window - 1e-9) - index for index, start in enumerate(times)),
        default=0,
    )


def order_span(orders: list[dict[str, Any]]) -> float:
    """Seconds of the sandbox clock from the first order created to the last."""
    times = [record["monotonic"] for record in orders if record["order_id"]]
    return max(times) - min(times)


def bound(jobs: int, limit: int = LIMIT, window: float = WINDOW) -> float:
    """The least time ``jobs`` orders can span at ``limit`` per sliding ``window``."""
    return (-(-jobs // limit) - 1) * window
