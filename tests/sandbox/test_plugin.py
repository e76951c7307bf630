"""The pytest plugin, run in inner sessions through pytester."""

from __future__ import annotations

import sys

import pytest

INI = "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
ASYNC_TEST = """
import aiohttp
import pytest

async def test_sandbox_answers(shipping_sandbox):
    headers = {"Authorization": f"Bearer {shipping_sandbox.token}"}
    async with aiohttp.ClientSession() as session:
        async with session.get(shipping_sandbox.base_url + "/quotes/1", headers=headers) as r:
            assert r.status == 404
    assert shipping_sandbox.clock.speed == EXPECTED_SPEED
"""


def test_fixture_yields_a_running_sandbox_at_speed_100(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(ASYNC_TEST.replace("EXPECTED_SPEED", "100"))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_marker_sets_options(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.shipping_sandbox(speed=500, seed=9, token="marked")
        async def test_marked(shipping_sandbox):
            assert shipping_sandbox.clock.speed == 500
            assert shipping_sandbox.token == "marked"

        @pytest.mark.shipping_sandbox(tokens=3, seed=9)
        async def test_accounts(shipping_sandbox):
            assert list(shipping_sandbox.accounts) == ["account-1", "account-2", "account-3"]
            assert len(set(shipping_sandbox.tokens)) == 3
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--strict-markers")
    result.assert_outcomes(passed=2)


def test_ini_option_sets_the_speed(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI + "shipping_sandbox_speed = 250\n")
    pytester.makepyfile(ASYNC_TEST.replace("EXPECTED_SPEED", "250"))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_session_survives_without_pytest_asyncio(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_unrelated():
            assert True

        def test_wants_the_sandbox(shipping_sandbox):
            pass
        """
    )
    # Make pytest-asyncio unimportable, as in an environment that never installed it
    # (--assert=plain keeps pytest's import hook from finding it before the blocker).
    code = (
        "import sys\n"
        "class Blocked:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'pytest_asyncio':\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Blocked())\n"
        "import pytest\n"
        "args = ['-p', 'no:asyncio', '-p', 'no:cacheprovider', '--assert=plain']\n"
        "raise SystemExit(pytest.main(args))\n"
    )
    result = pytester.run(sys.executable, "-c", code)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*needs pytest-asyncio: pip install pytest-asyncio*"])


def test_a_client_built_from_the_environment_uses_the_sandbox_on_its_clock(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(
        """
        import os

        import pytest

        from shipping_async import AsyncShippingClient, NotFoundError

        @pytest.mark.shipping_sandbox(speed=250)
        async def test_app_client(shipping_sandbox):
            async with AsyncShippingClient() as client:  # what an app does at start-up
                assert client.base_url == shipping_sandbox.base_url
                assert client.clock.speed == 250
                assert client.order_limiter.window == 60  # protocol seconds, on that clock
                with pytest.raises(NotFoundError):  # the token is accepted: 404, not 401
                    await client.orders.get(1)

        def test_after_the_fixture_the_environment_is_restored():
            assert "SHIPPING_CLOCK_SPEED" not in os.environ
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
