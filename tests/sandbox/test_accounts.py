"""Several accounts in one sandbox: a token each (or several), an order budget each."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from shipping_async.clock import ManualClock
from shipping_async.sandbox import SandboxServer, create_app
from shipping_async.sandbox._accounts import read_tokens_file
from shipping_async.sandbox._core import generate_token

from .support import Api, order_body
from .test_cli import LISTENING, _line, _sandbox_process


async def _orders(api: Api, token: str, count: int) -> list[int]:
    # Invalid bodies are counted like any other POST /orders and are the cheapest to send.
    replies = await asyncio.gather(
        *(api.call("POST", "/orders", token=token, json=order_body(0)) for _ in range(count))
    )
    return [reply.status for reply in replies]


async def _api(**options: Any) -> AsyncIterator[Api]:
    async with (
        SandboxServer(clock=ManualClock(), rate_limit=2, **options) as server,
        aiohttp.ClientSession() as session,
    ):
        yield Api(session, server)


@pytest.fixture
async def three() -> AsyncIterator[Api]:
    async for api in _api(tokens=3, seed=4):
        yield api


async def test_every_token_authenticates_and_the_log_names_its_account(three: Api) -> None:
    tokens = three.server.tokens
    for token in tokens:
        assert (await three.call("GET", "/quotes/1", token=token)).status == 404
    refused = await three.call("GET", "/quotes/1", token=tokens[0] + "x")
    accounts = [record.account for record in three.server.control.requests()]
    assert list(three.server.accounts) == ["account-1", "account-2", "account-3"]
    assert refused.status == 401
    assert accounts == ["account-1", "account-2", "account-3"]  # a 401 is counted, not logged
    assert three.server.control.refused_requests() == 1


async def test_each_account_has_its_own_order_budget(three: Api) -> None:
    first, second, _ = three.server.tokens
    spent = await _orders(three, first, 3)
    other = await _orders(three, second, 2)
    assert sorted(spent) == [400, 400, 429]
    assert other == [400, 400]


async def test_tokens_of_one_account_share_its_budget() -> None:
    accounts = {"acme": ("acme-1", "acme-2"), "globex": "globex-1"}
    async for api in _api(tokens=accounts):
        first = await _orders(api, "acme-1", 2)
        shared = await _orders(api, "acme-2", 1)
        other = await _orders(api, "globex-1", 1)
        records = api.server.control.requests(method="POST", path="/orders")
    assert (first, shared, other) == ([400, 400], [429], [400])
    assert [record.account for record in records] == ["acme", "acme", "acme", "globex"]


async def test_seeded_tokens_are_reproducible_and_the_first_is_the_single_token() -> None:
    one = SandboxServer(seed=11)
    many = SandboxServer(tokens=4, seed=11)
    again = SandboxServer(tokens=4, seed=11)
    assert many.tokens == again.tokens
    assert many.token == one.token == generate_token(11)
    assert len(set(many.tokens)) == 4


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({"token": "a", "tokens": 2}, "either token or tokens", id="both"),
        pytest.param({"tokens": 0}, "between 1 and", id="zero"),
        pytest.param({"tokens": ["same", "same"]}, "given twice", id="repeated"),
        pytest.param({"tokens": ["has space"]}, "without spaces", id="space"),
        pytest.param({"tokens": {"acme": ()}}, "has no token", id="empty-account"),
    ],
)
def test_unusable_tokens_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        create_app(**options)


def test_tokens_file_reads_accounts_and_skips_comments(tmp_path: Path) -> None:
    path = tmp_path / "tokens.txt"
    path.write_text("# accounts\nacme t1\n\nacme t2\nloose-token\n  globex   t3  \n")
    assert read_tokens_file(path) == {
        "acme": ["t1", "t2"],
        "account-3": ["loose-token"],
        "globex": ["t3"],
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("acme t1 extra\n", "line 1: expected 'TOKEN' or 'ACCOUNT TOKEN'", id="fields"),
        pytest.param("ok\nacme t\x01\n", "line 2: a token is printable", id="control"),
        pytest.param("# nothing\n", "no token in the file", id="empty"),
    ],
)
def test_tokens_file_errors_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "tokens.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(message)):
        read_tokens_file(path)


async def test_cli_tokens_n_prints_one_working_token_per_account() -> None:
    async with _sandbox_process("--tokens", "3", "--seed", "2", "--rate-limit", "1") as process:
        url = LISTENING.match(await _line(process)).group(1)  # type: ignore[union-attr]
        lines = [await _line(process) for _ in range(3)]
        tokens = [line.split(": ", 1)[1] for line in lines]
        statuses = []
        async with aiohttp.ClientSession() as session:
            for token in (*tokens, tokens[0]):
                headers = {"Authorization": f"Bearer {token}"}
                async with session.post(url + "/orders", json={}, headers=headers) as reply:
                    statuses.append(reply.status)
        process.terminate()
        assert await process.wait() == 0
    assert [line.split(":")[0] for line in lines] == [
        "token account-1",
        "token account-2",
        "token account-3",
    ]
    # One order per window and account: each account's first is read (and refused as
    # invalid), account-1's second is over its budget.
    assert statuses == [400, 400, 400, 429]


async def test_cli_tokens_file_serves_its_accounts(tmp_path: Path) -> None:
    path = tmp_path / "tokens.txt"
    path.write_text("acme file-token-1\nglobex file-token-2\n")
    async with _sandbox_process("--tokens-file", str(path)) as process:
        url = LISTENING.match(await _line(process)).group(1)  # type: ignore[union-attr]
        async with aiohttp.ClientSession() as session:
            headers = {"Authorization": "Bearer file-token-2"}
            async with session.get(url + "/quotes/1", headers=headers) as reply:
                assert reply.status == 404
        process.terminate()
        assert process.stdout is not None
        rest = await asyncio.wait_for(process.stdout.read(), timeout=20)
        assert await process.wait() == 0
    assert rest == b""  # tokens from a file are not echoed


def test_cli_tokens_file_error_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from shipping_async.cli import main

    path = tmp_path / "tokens.txt"
    path.write_text("a b c\n")
    assert main(["sandbox", "--tokens-file", str(path)]) == 2
    out = capsys.readouterr().out
    assert out.startswith("error: --tokens-file: ")
    assert "line 1" in out
