"""pytest plugin: the ``shipping_sandbox`` fixture, a running sandbox per test.

Loaded through the ``pytest11`` entry point in every pytest session of anyone who installs
shipping-async, so it must never break a session: it imports nothing heavy at load time and
works without pytest-asyncio (the fixture then fails with a message saying what to install).

Usage::

    async def test_quote(shipping_sandbox):
        url = shipping_sandbox.base_url + "/quotes"

    @pytest.mark.shipping_sandbox(speed=1000, seed=7)
    async def test_fast(shipping_sandbox): ...

    @pytest.mark.shipping_sandbox(tokens=3)     # three accounts, an order budget each
    async def test_accounts(shipping_sandbox):
        token = shipping_sandbox.accounts["account-2"][0]

The speed comes from the marker, else the ``shipping_sandbox_speed`` ini option, else 100.
During the test ``SHIPPING_BASE_URL``, ``SHIPPING_ACCESS_TOKEN`` and ``SHIPPING_CLOCK_SPEED``
point at the sandbox, so ``AsyncShippingClient()`` (an app's own) uses it, on its clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from shipping_async.sandbox._server import SandboxServer

__all__ = ["DEFAULT_SPEED", "shipping_sandbox"]

DEFAULT_SPEED = 100.0
_MARKER = "shipping_sandbox"
_INI_SPEED = "shipping_sandbox_speed"
_MISSING_ASYNCIO = (
    "the shipping_sandbox fixture is async and needs pytest-asyncio: "
    "pip install pytest-asyncio (and set asyncio_mode = 'auto' or mark the test "
    "with @pytest.mark.asyncio)"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        _INI_SPEED,
        help=f"speed of the shipping_sandbox fixture's clock (default {DEFAULT_SPEED:g})",
        default=str(DEFAULT_SPEED),
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{_MARKER}(**options): options of the shipping_sandbox fixture's SandboxServer "
        "(speed, seed, token, tokens, rate_mode, ...)",
    )


def _options(request: pytest.FixtureRequest) -> dict[str, Any]:
    options: dict[str, Any] = {"speed": float(request.config.getini(_INI_SPEED))}
    marker = request.node.get_closest_marker(_MARKER)
    if marker is not None:
        options.update(marker.kwargs)
    return options


async def _running_sandbox(request: pytest.FixtureRequest) -> AsyncIterator[SandboxServer]:
    """A running :class:`~shipping_async.sandbox.SandboxServer` for one test.

    While it runs, the environment says what ``AsyncShippingClient()`` reads: the base
    URL, the token and the sandbox's clock speed, so a client the app under test builds
    from the environment talks to this sandbox on its time.
    """
    from shipping_async._client import BASE_URL_ENV, CLOCK_SPEED_ENV, TOKEN_ENV
    from shipping_async.sandbox._server import SandboxServer

    async with SandboxServer(**_options(request)) as server:
        with pytest.MonkeyPatch.context() as env:
            env.setenv(BASE_URL_ENV, server.base_url)
            env.setenv(TOKEN_ENV, server.token)
            env.setenv(CLOCK_SPEED_ENV, repr(getattr(server.clock, "speed", 1.0)))
            yield server


def _missing_asyncio() -> None:
    """A running sandbox; unavailable because pytest-asyncio is not installed."""
    pytest.fail(_MISSING_ASYNCIO, pytrace=False)


def _define_fixture() -> Any:
    # pytest-asyncio is optional: without it the fixture exists but explains what to install,
    # instead of the whole session failing at plugin load.
    try:
        import pytest_asyncio
    except ImportError:
        return pytest.fixture(_missing_asyncio, name="shipping_sandbox")
    return pytest_asyncio.fixture(_running_sandbox, name="shipping_sandbox")


shipping_sandbox = _define_fixture()
