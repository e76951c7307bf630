"""Fixtures of the resource tests: a mocked HTTP layer and a client on a manual clock."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from aioresponses import aioresponses

from shipping_async._client import AsyncShippingClient

from .support import MockAPI, make_client


@pytest.fixture
def mock() -> Iterator[aioresponses]:
    with MockAPI() as mocked:
        yield mocked


@pytest.fixture
async def client() -> AsyncIterator[AsyncShippingClient]:
    async with make_client() as shipping:
        yield shipping
