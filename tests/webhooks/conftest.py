"""Fixtures of the webhook tests: event bodies, a loopback server, an HTTP session."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgspec
import pytest
from aiohttp import web

from shipping_async._client import AsyncShippingClient
from shipping_async.sandbox import SandboxServer

from .support import BodyFactory, Endpoint, Serve, event_fields


@pytest.fixture
def make_body() -> BodyFactory:
    """``make_body(object_id=7)`` -> the JSON bytes of a delivery body."""

    def make(**overrides: Any) -> bytes:
        return msgspec.json.encode(event_fields(**overrides))

    return make


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """``await serve(app)`` runs ``app`` on 127.0.0.1 (a free port) and returns its URL."""
    runners: list[web.AppRunner] = []

    async def start(app: web.Application) -> str:
        runner = web.AppRunner(app)
        await runner.setup()
        runners.append(runner)
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        return f"http://{host}:{port}"

    yield start
    for runner in reversed(runners):
        # Let the server see the client's closed connections first: a shutdown that
        # starts while aiohttp still discards an oversized body waits out its lingering.
        async with asyncio.timeout(2):
            # aiohttp offers no event for "connection closed": poll its connection set.
            while runner.server is not None and runner.server.connections:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        await runner.cleanup()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def sandbox() -> AsyncIterator[SandboxServer]:
    """A sandbox whose clock runs 400 times faster: the 20/40/60/80 s retries take 0.5 s."""
    async with SandboxServer(speed=400, seed=5, delivery_timeout=2000.0) as server:
        yield server


@pytest.fixture
async def client(sandbox: SandboxServer) -> AsyncIterator[AsyncShippingClient]:
    async with AsyncShippingClient(sandbox.token, base_url=sandbox.base_url) as api:
        yield api


@pytest.fixture
async def endpoint(sandbox: SandboxServer) -> AsyncIterator[Endpoint]:
    """A loopback receiver endpoint timed on the sandbox's clock (see ``Endpoint``)."""
    listener = Endpoint(sandbox.clock)
    yield listener
    await listener.close()
