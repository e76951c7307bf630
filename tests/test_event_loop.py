"""The loop the long-running commands run on: uvloop when installed, asyncio's on request."""

from __future__ import annotations

import asyncio

import pytest

from shipping_async.cli import _loop


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_the_commands_run_on_uvloop_when_it_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("uvloop", reason="uvloop is in the cli extra; without it: asyncio")
    monkeypatch.delenv(_loop.LOOP_ENV, raising=False)
    assert _loop.run(_loop_module()).startswith("uvloop")


def test_shipping_event_loop_asyncio_keeps_asyncios_own_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(_loop.LOOP_ENV, "asyncio")
    assert _loop.run(_loop_module()).startswith("asyncio")
