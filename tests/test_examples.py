"""The README's quickstart runs as written, for a direct and a hub shipment."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


async def test_the_quickstart_ships_a_direct_and_a_hub_shipment_to_a_booked_pickup(
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = importlib.util.spec_from_file_location("quickstart", EXAMPLES / "quickstart.py")
    assert spec is not None
    assert spec.loader is not None
    quickstart = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quickstart)

    await quickstart.main()

    direct, hub = capsys.readouterr().out.splitlines()
    assert re.match(r"QS-DIRECT-1: order \d+, 1 leg\(s\), waybills \['\w+'\], [\d.]+ USD", direct)
    assert re.match(r"QS-HUB-1: order \d+, 2 leg\(s\), waybills \['\w+', '\w+'\]", hub)
    assert re.search(r"#PU\d+$", direct)
    assert re.search(r"#PU\d+$", hub)
