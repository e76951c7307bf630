"""Prism serves our OpenAPI document, and every SDK method works against it, static and dynamic.

Prism (installed on demand, see ``support.py``) answers from the document's examples
(static) or from answers json-schema-faker builds from its schemas (dynamic), and checks
every request against the document. The SDK decodes strictly here: any drift between the
document and the models fails. ``benchmarks/prism_mock.py`` runs the 50 calls per method of
the acceptance; the suite runs fewer (Prism takes about a third of a second per call on
two shared cores).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from .support import METHODS, RunningPrism, Tally, drive, prism, table

CALLS = 2  # per method and mode here; the benchmark makes 50


@pytest.fixture(params=[pytest.param(False, id="static"), pytest.param(True, id="dynamic")])
async def running(request: pytest.FixtureRequest) -> AsyncIterator[RunningPrism]:
    async with prism(dynamic=request.param) as server:
        yield server


@pytest.mark.timeout(600)  # the first run installs Prism (about a minute)
async def test_every_sdk_method_decodes_prism_answers_and_prism_accepts_every_request(
    running: RunningPrism,
) -> None:
    tallies = await drive(running.base_url, CALLS, decoding="strict")

    report = table({running.mode: tallies})
    assert set(tallies) == set(METHODS)
    for name, tally in tallies.items():
        assert tally == Tally(calls=CALLS, ok=CALLS), f"{name}\n{report}"
    # The count of refusals can fail: a request the document forbids (a quote without its
    # required fields, sent around the SDK's own checks) is refused, and seen.
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            running.base_url + "/quotes",
            json={"value_of_goods": "1"},
            headers={"Authorization": "Bearer t"},
        ) as response,
    ):
        assert response.status == 422
        assert "origin_country_id" in response.headers["sl-violations"]
