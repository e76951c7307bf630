"""The outage tests' own PostgreSQL really stops and starts, and keeps its data."""

from __future__ import annotations

import asyncpg
import pytest

from .private_postgres import PrivatePostgres


async def test_private_postgres_refuses_connections_while_crashed_and_keeps_data_after(
    private_postgres: PrivatePostgres,
) -> None:
    connection = await asyncpg.connect(private_postgres.dsn)
    await connection.execute("CREATE TABLE kept (value int); INSERT INTO kept VALUES (7)")
    await connection.close()

    private_postgres.crash()
    with pytest.raises(ConnectionRefusedError):
        await asyncpg.connect(private_postgres.dsn, timeout=2)

    private_postgres.start()
    connection = await asyncpg.connect(private_postgres.dsn)
    assert await connection.fetchval("SELECT value FROM kept") == 7
    await connection.close()
