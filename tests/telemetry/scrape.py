"""Scrape a /metrics endpoint over HTTP and read it with prometheus_client's parser."""

from __future__ import annotations

from typing import TypeAlias

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

#: Every sample of a scrape: (name, labels) -> value.
Samples: TypeAlias = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(port: int, host: str = "127.0.0.1") -> Samples:
    """Every sample of ``http://host:port/metrics``: (name, labels) -> value."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            f"http://{host}:{port}/metrics", timeout=aiohttp.ClientTimeout(total=10)
        ) as response,
    ):
        assert response.status == 200
        text = await response.text()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample ``name`` with exactly ``labels``; 0 when it is not there."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, got), v in samples.items() if n == name and wanted <= got)
