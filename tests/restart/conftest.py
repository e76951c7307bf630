"""The scale-out fixtures (a PostgreSQL schema and a Redis prefix per test) for these tests."""

from tests.scaleout.conftest import pg_schema, prefix, redis_client

__all__ = ["pg_schema", "prefix", "redis_client"]
