"""The scale-out package names its stores lazily, so it imports without the extras."""

from __future__ import annotations

import subprocess
import sys

import pytest

import shipping_async.scaleout as scaleout
from shipping_async.scaleout.postgres_journal import PostgresJournal
from shipping_async.scaleout.redis_limiter import RedisOrderLimiter


def test_the_stores_are_importable_from_the_package() -> None:
    assert scaleout.RedisOrderLimiter is RedisOrderLimiter
    assert scaleout.PostgresJournal is PostgresJournal


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = scaleout.Nope


def test_importing_the_package_loads_neither_driver() -> None:
    code = (
        "import sys, shipping_async.scaleout; "
        "print('redis' in sys.modules, 'asyncpg' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
