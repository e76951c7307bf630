"""A worker's account clients: one connection pool for all, each request with its own token."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from shipping_async.limiter import RollingWindowLimiter
from shipping_async.scaleout.accounts import AccountClients


@pytest.fixture
async def server() -> AsyncIterator[tuple[TestServer, list[tuple[str, str, str]]]]:
    """GET /client_api/v2/webhooks/{id}; records (peer, Authorization, Cookie) of each
    request and sets a cookie, as a server that tracks sessions would."""
    seen: list[tuple[str, str, str]] = []

    async def webhook(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        seen.append(
            (str(peer), request.headers.get("Authorization", ""), request.headers.get("Cookie", ""))
        )
        answer = web.json_response({"webhook": {"id": 1, "token": "wh"}})
        answer.set_cookie("session", "of-whoever-asked")
        return answer

    app = web.Application()
    app.router.add_get("/client_api/v2/webhooks/{id}", webhook)
    async with TestServer(app, host="127.0.0.1") as test_server:
        yield test_server, seen


async def test_accounts_share_one_connection_each_with_its_own_token_and_no_cookie(
    server: tuple[TestServer, list[tuple[str, str, str]]],
) -> None:
    test_server, seen = server
    clients = AccountClients(
        lambda account: RollingWindowLimiter(),
        environ={"SHIPPING_ACCESS_TOKEN__A": "tok-a", "SHIPPING_ACCESS_TOKEN__B": "tok-b"},
        base_url=str(test_server.make_url("/client_api/v2")),
    )
    try:
        for account in ("a", "b", "a", "b"):  # one after the other: a free connection is reused
            await clients.client(account).webhooks.get(1)
    finally:
        await clients.aclose()

    assert [auth for _, auth, _ in seen] == [f"Bearer tok-{x}" for x in "abab"]
    assert len({peer for peer, _, _ in seen}) == 1  # one connection served both accounts
    assert [cookie for _, _, cookie in seen] == [""] * 4  # no account gets another's cookie
