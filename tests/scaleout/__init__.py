"""Tests of the scale-out: the Redis limiter, the PostgreSQL journal, many workers."""
