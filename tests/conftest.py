"""Shared by every test: API answers are decoded strictly unless a test asks for leniency.

The SDK's default is lenient (an odd field is kept raw in ``undecoded``); here any drift
between the sandbox, the OpenAPI document and the models fails loudly instead. Tests of
the lenient mode pass ``decoding="lenient"`` themselves.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def strict_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHIPPING_DECODING", "strict")
