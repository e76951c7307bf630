"""Fixtures of the runner's unit tests: a manual clock and an in-memory journal on it.

A module that needs another journal (a file, PostgreSQL) defines its own ``journal``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from shipping_async.bulk.sqlite_journal import SQLiteJournal
from shipping_async.clock import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    """A clock that moves only when the test advances it."""
    return ManualClock()


@pytest.fixture
async def journal(clock: ManualClock) -> AsyncIterator[SQLiteJournal]:
    """An in-memory SQLite journal on ``clock`` (leases lapse as the test says)."""
    async with await SQLiteJournal.open(":memory:", clock=clock) as opened:
        yield opened
