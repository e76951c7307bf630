"""The limiter's scripts on one redis-py connection: unknown scripts, cancels, outages.

The limiter's own behaviour on it is tested in ``test_redis_limiter.py`` (with limiters made
from a URL and from a redis-py client).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from shipping_async.scaleout._scripts import Script, ScriptConnection

from .conftest import REDIS_URL, PrivateRedis, free_port

ECHO = Script.of("return {KEYS[1], ARGV[1], tonumber(ARGV[2]) + 1}")


@pytest.fixture
async def scripts() -> AsyncIterator[ScriptConnection]:
    connection = ScriptConnection(REDIS_URL)
    yield connection
    await connection.aclose()


async def test_a_script_redis_does_not_know_yet_is_sent_whole(
    private_redis: PrivateRedis,
) -> None:
    await private_redis.wait_ready()
    scripts = ScriptConnection(private_redis.url)
    admin = aioredis.Redis.from_url(private_redis.url)
    try:
        assert await scripts.run(ECHO, ["k"], ["a", 41]) == [b"k", b"a", 42]
        assert await admin.script_exists(ECHO.sha) == [True]  # EVAL cached it
        await admin.script_flush()  # as a restarted Redis would have
        assert await scripts.run(ECHO, ["k"], ["b", 1]) == [b"k", b"b", 2]
    finally:
        await admin.aclose()
        await scripts.aclose()


async def test_overlapping_calls_get_their_own_replies(scripts: ScriptConnection) -> None:
    replies = await asyncio.gather(*(scripts.run(ECHO, ["k"], [str(i), i]) for i in range(30)))
    assert replies == [[b"k", str(i).encode(), i + 1] for i in range(30)]


async def test_an_error_reply_raises_and_the_connection_goes_on(
    scripts: ScriptConnection,
) -> None:
    with pytest.raises(ResponseError):
        await scripts.run(Script.of("return redis.call('NOPE')"), [], [])
    assert await scripts.run(ECHO, ["k"], ["x", 0]) == [b"k", b"x", 1]


async def test_a_cancelled_call_leaves_no_reply_for_the_next(scripts: ScriptConnection) -> None:
    slow = Script.of(  # busy for 30 ms inside Redis
        "local function us() local t = redis.call('TIME') return t[1] * 1e6 + t[2] end "
        "local start = us() repeat until us() - start > 30000 return 'slow'"
    )
    call = asyncio.create_task(scripts.run(slow, [], []))
    await asyncio.sleep(0.01)  # sent, not answered
    call.cancel()
    assert await scripts.run(ECHO, ["k"], ["after", 1]) == [b"k", b"after", 2]


async def test_nobody_listening_is_a_redis_error() -> None:
    scripts = ScriptConnection(f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(RedisError):
        await scripts.run(ECHO, ["k"], ["x", 1])
    await scripts.aclose()


async def test_a_redis_that_went_away_and_came_back_is_used_again(
    private_redis: PrivateRedis,
) -> None:
    await private_redis.wait_ready()
    scripts = ScriptConnection(private_redis.url)
    try:
        assert await scripts.run(ECHO, ["k"], ["before", 1]) == [b"k", b"before", 2]
        private_redis.stop()
        with pytest.raises(RedisError):
            await scripts.run(ECHO, ["k"], ["away", 1])
        private_redis.start()
        await private_redis.wait_ready()
        assert await scripts.run(ECHO, ["k"], ["back", 1]) == [b"k", b"back", 2]
    finally:
        await scripts.aclose()


async def test_a_url_keeps_its_options_and_a_client_lends_its_pool() -> None:
    with_options = ScriptConnection(f"{REDIS_URL}?socket_keepalive=true&db=0")
    client = aioredis.Redis.from_url(REDIS_URL)
    lent = ScriptConnection(client)
    try:
        assert await with_options.run(ECHO, ["k"], ["x", 1]) == [b"k", b"x", 2]
        assert await lent.run(ECHO, ["k"], ["y", 1]) == [b"k", b"y", 2]
        await lent.aclose()
        assert await client.ping()  # a lent pool stays open for its owner
    finally:
        await with_options.aclose()
        await client.aclose()
