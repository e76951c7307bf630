"""Fixtures of the scale-out tests: the machine's Redis and PostgreSQL, isolated per test.

Each test gets its own Redis key prefix and its own PostgreSQL schema, removed afterwards,
so runs (and parallel runs) never see each other's data. A private ``redis-server`` on a
port of its own serves the tests that stop Redis: the machine's shared one is never
stopped. ``sandbox`` (a sandbox process for account ``north``) and ``journal`` (a
PostgreSQL journal in the test's schema, on the processes' clock) serve the tests that run
worker processes; a module that needs another kind defines its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

from shipping_async.clock import ScaledClock
from shipping_async.scaleout.postgres_journal import PostgresJournal
from tests.pg_schemas import POSTGRES_DSN, own_schema

from .private_postgres import postgres_template, private_postgres
from .processes import SPEED, Sandbox, start_sandbox

# The outage tests' fixtures, and the DSN the scale-out tests import from here.
__all__ = ["POSTGRES_DSN", "postgres_template", "private_postgres"]

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture
def prefix() -> str:
    """A Redis key prefix no other test (or run) uses."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def redis_client(prefix: str) -> AsyncIterator[aioredis.Redis]:
    """A client of the shared Redis; every key under ``prefix`` is deleted afterwards."""
    client = aioredis.Redis.from_url(REDIS_URL)
    yield client
    keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()


@pytest.fixture
async def pg_schema() -> AsyncIterator[str]:
    """A PostgreSQL schema of its own (dropped afterwards); its name."""
    async with own_schema() as name:
        yield name


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PrivateRedis:
    """A ``redis-server`` of this test alone, without persistence, to stop and start."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._dir = tempfile.mkdtemp(prefix="redis-")
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self._dir,
            ],
            stdout=subprocess.DEVNULL,
        )

    async def wait_ready(self) -> None:
        for _ in range(200):
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                return
            await asyncio.sleep(0.01)
        raise RuntimeError(f"private redis on port {self.port} did not start")

    def stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    """A running private Redis (see :class:`PrivateRedis`)."""
    server = PrivateRedis()
    server.start()
    yield server
    server.cleanup()


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    """A sandbox process whose token ``tok-north`` is account ``north``'s, stopped afterwards."""
    server = start_sandbox("tok-north")
    yield server
    server.stop()


@pytest.fixture
async def journal(pg_schema: str) -> AsyncIterator[PostgresJournal]:
    """A PostgreSQL journal in the test's own schema, on the worker processes' clock."""
    opened = await PostgresJournal.open(POSTGRES_DSN, schema=pg_schema, clock=ScaledClock(SPEED))
    yield opened
    await opened.close()
