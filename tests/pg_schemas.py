"""PostgreSQL schemas of a test's own on the machine's shared server: a fresh name, its drop.

Every test that stores in PostgreSQL works in a schema no other test (or run) uses and
drops it afterwards, so runs, parallel ones too, never see each other's rows.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

POSTGRES_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def new_schema() -> str:
    """A schema name no other test uses (the schema itself is made by whoever opens it)."""
    return f"test_{uuid.uuid4().hex[:12]}"


async def drop_schema(name: str) -> None:
    """Drop schema ``name`` and everything in it, if it was made at all."""
    connection = await asyncpg.connect(POSTGRES_DSN)
    try:
        await connection.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await connection.close()


@asynccontextmanager
async def own_schema() -> AsyncIterator[str]:
    """A fresh schema name, dropped on the way out."""
    name = new_schema()
    try:
        yield name
    finally:
        await drop_schema(name)
