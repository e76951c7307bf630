"""Configuration that leaks or travels in clear: cleartext PostgreSQL/Redis URLs to remote
hosts are warned about, and the token can come from a file instead of the command line."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from shipping_async import AsyncShippingClient, ConfigurationError
from shipping_async._cleartext import _warned, warn_if_cleartext


@pytest.fixture(autouse=True)
def fresh_warnings() -> None:
    _warned.clear()


@pytest.mark.parametrize(
    ("url", "warned"),
    [
        pytest.param("redis://10.0.0.5:6379/0", True, id="redis-remote"),
        pytest.param("redis://cache.internal/0", True, id="redis-remote-name"),
        pytest.param("rediss://cache.internal/0", False, id="rediss"),
        pytest.param("redis://127.0.0.1:6379/0", False, id="redis-loopback"),
        pytest.param("redis://[::1]:6379/0", False, id="redis-loopback-v6"),
        pytest.param("unix:///run/redis.sock", False, id="redis-socket"),
        pytest.param("postgresql://u@db.internal/jobs", True, id="pg-remote"),
        pytest.param("postgresql://u@db.internal/jobs?sslmode=require", True, id="pg-unverified"),
        pytest.param("postgresql://u@db.internal/jobs?sslmode=verify-full", False, id="pg-tls"),
        pytest.param("postgresql://u@localhost/jobs", False, id="pg-localhost"),
        pytest.param("postgresql:///jobs?host=/run/postgresql", False, id="pg-socket"),
        pytest.param("postgresql://u@127.0.0.1,db.internal/jobs", True, id="pg-one-remote"),
    ],
)
def test_a_remote_host_without_verified_tls_is_warned_about(
    url: str, warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="shipping_async"):
        assert warn_if_cleartext(url) is warned
    assert ("not verified TLS" in caplog.text) is warned
    assert "u@" not in caplog.text  # the user (or a password) is not repeated in the log


def test_pgsslmode_verify_full_counts_as_tls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGSSLMODE", "verify-full")
    assert warn_if_cleartext("postgresql://db.internal/jobs") is False


def test_the_redis_limiter_warns_once_per_url_for_a_cleartext_remote_redis(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from shipping_async.scaleout.redis_limiter import RedisOrderLimiter

    with caplog.at_level(logging.WARNING, logger="shipping_async"):
        for account in ("acme", "globex"):  # nothing connects until the first acquire
            RedisOrderLimiter("redis://10.255.0.1:6379/0", account=account)
    assert caplog.text.count("not verified TLS; use rediss://") == 1


def test_the_token_can_come_from_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "token"
    secret.write_text("tok-from-file\n")
    monkeypatch.delenv("SHIPPING_ACCESS_TOKEN", raising=False)
    monkeypatch.setenv("SHIPPING_ACCESS_TOKEN_FILE", str(secret))

    client = AsyncShippingClient(base_url="https://api.example.com/client_api/v2")

    assert client._token.reveal() == "tok-from-file"


def test_an_unreadable_token_file_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SHIPPING_ACCESS_TOKEN", raising=False)
    monkeypatch.setenv("SHIPPING_ACCESS_TOKEN_FILE", str(tmp_path / "missing"))
    with pytest.raises(ConfigurationError, match="SHIPPING_ACCESS_TOKEN_FILE"):
        AsyncShippingClient(base_url="https://api.example.com/client_api/v2")


async def test_the_bulk_command_reads_the_token_from_a_file(tmp_path: Path) -> None:
    import asyncio
    import csv
    import os
    import sys

    from shipping_async.sandbox import SandboxServer

    example = Path(__file__).parent.parent / "examples" / "shipments.csv"
    rows = list(csv.DictReader(example.open(newline="", encoding="utf-8")))[:2]
    source = tmp_path / "two.csv"
    with source.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    env = {k: v for k, v in os.environ.items() if k != "SHIPPING_ACCESS_TOKEN"}
    async with SandboxServer(speed=100) as sandbox:
        secret = tmp_path / "token"
        secret.write_text(sandbox.token + "\n")
        env["SHIPPING_ACCESS_TOKEN_FILE"] = str(secret)
        command = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "shipping_async", "bulk", str(source),
            "--base-url", sandbox.base_url, "--rate-limit", "20/0.6",
            "--journal", str(tmp_path / "batch.journal"), "--progress", "plain",
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        output, _ = await command.communicate()

    assert command.returncode == 0, output.decode()
    assert sandbox.control.requests(method="POST", path="/orders")
