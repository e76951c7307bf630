"""``shipping-async sandbox`` as a subprocess: first line, generated token, clean stop."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest

from .support import quote_body

LISTENING = re.compile(r"^Sandbox listening on (http://127\.0\.0\.1:(\d+)/client_api/v2)$")


@asynccontextmanager
async def _sandbox_process(
    *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[asyncio.subprocess.Process]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "shipping_async",
        "sandbox",
        "--port",
        "0",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def _line(process: asyncio.subprocess.Process) -> str:
    assert process.stdout is not None
    raw = await asyncio.wait_for(process.stdout.readline(), timeout=20)
    return raw.decode().rstrip("\n")


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
async def test_cli_prints_the_url_and_token_and_stops_cleanly(stop: signal.Signals) -> None:
    async with _sandbox_process("--speed", "100", "--seed", "5") as process:
        first = await _line(process)
        second = await _line(process)
        match = LISTENING.match(first)
        assert match, first
        assert int(match.group(2)) > 0  # the real port, not 0
        assert second.startswith("token: ")
        token = second.removeprefix("token: ")
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                match.group(1) + "/quotes",
                json=quote_body(),
                headers={"Authorization": f"Bearer {token}"},
            ) as reply,
        ):
            assert reply.status == 201
        process.send_signal(stop)
        code = await asyncio.wait_for(process.wait(), timeout=20)
    assert code == 0


async def test_cli_with_a_token_prints_only_the_url() -> None:
    async with _sandbox_process("--token", "given-token", "--rate-mode", "fixed") as process:
        first = await _line(process)
        assert LISTENING.match(first)
        url = LISTENING.match(first).group(1)  # type: ignore[union-attr]
        async with (
            aiohttp.ClientSession() as session,
            session.get(url + "/quotes/1", headers={"Authorization": "Bearer given-token"}) as r,
        ):
            assert r.status == 404  # authenticated; the quote does not exist
        process.terminate()
        assert process.stdout is not None
        rest = await asyncio.wait_for(process.stdout.read(), timeout=20)
        assert await process.wait() == 0
    assert rest == b""


async def test_cli_reads_the_token_from_the_environment() -> None:
    env = {"SHIPPING_ASYNC_SANDBOX_TOKEN": "env-token"}
    async with _sandbox_process(env=env) as process:
        url = LISTENING.match(await _line(process)).group(1)  # type: ignore[union-attr]
        async with (
            aiohttp.ClientSession() as session,
            session.get(url + "/quotes/1", headers={"Authorization": "Bearer env-token"}) as r,
        ):
            assert r.status == 404
        process.terminate()
        assert await process.wait() == 0


def test_cli_refuses_a_non_positive_speed(capsys: pytest.CaptureFixture[str]) -> None:
    from shipping_async.cli import main

    assert main(["sandbox", "--speed", "0"]) == 2
    assert "--speed" in capsys.readouterr().out
