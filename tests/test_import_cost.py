"""What a process loads: the package root nothing, a command only what it runs on."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Loaded only by what uses them: the webhook receiver's web server, the simulator, the
#: ledger, the drivers of the shared stores.
HEAVY = (
    "aiohttp.web",
    "shipping_async.webhooks",
    "shipping_async.sandbox",
    "shipping_async.ledger",
    "asyncpg",
    "redis",
)


def _loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_importing_the_package_loads_none_of_its_modules() -> None:
    loaded = _loaded_after("import shipping_async")
    assert sorted(m for m in loaded if m.startswith("shipping_async.")) == [
        "shipping_async._version"
    ]
    assert "aiohttp" not in loaded


def test_the_package_keeps_its_logs_to_itself_whichever_module_comes_first() -> None:
    code = (
        "import logging\n"
        "from shipping_async import RollingWindowLimiter\n"
        "logging.getLogger('shipping_async.limiter').warning('unheard')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stderr == ""


def test_a_name_of_the_package_loads_its_own_module_only() -> None:
    loaded = _loaded_after("from shipping_async import AsyncShippingClient, ShipmentJob")
    assert "shipping_async._client" in loaded
    assert _heavy(loaded) == []


@pytest.mark.parametrize("command", ["bulk", "worker"])
def test_a_run_command_loads_neither_the_webhook_server_nor_the_sandbox(command: str) -> None:
    loaded = _loaded_after(
        f"from shipping_async.cli import build_parser\nbuild_parser({command!r})"
    )
    assert f"shipping_async.cli.{command}" in loaded
    assert _heavy(loaded) == []


def test_the_full_parser_still_lists_every_command() -> None:
    from shipping_async.cli import _COMMAND_MODULES, build_parser

    help_text = build_parser().format_help()
    assert all(name in help_text for name in _COMMAND_MODULES)
