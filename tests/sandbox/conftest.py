"""Fixtures of the sandbox tests: a sandbox on loopback and a raw HTTP helper."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from shipping_async.sandbox import SandboxServer

from .support import TOKEN, Api


def pytest_configure(config: pytest.Config) -> None:
    # `pytest_plugins = ["pytester"]` is refused in a non-root conftest when the whole
    # suite runs; registering the builtin plugin here works in both cases.
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")


@pytest.fixture
async def server() -> AsyncIterator[SandboxServer]:
    async with SandboxServer(token=TOKEN, speed=100, seed=7) as sandbox:
        yield sandbox


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as http:
        yield http


@pytest.fixture
def api(session: aiohttp.ClientSession, server: SandboxServer) -> Api:
    return Api(session, server)
