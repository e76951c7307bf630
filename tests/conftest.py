"""Shared by every test: API answers are decoded strictly unless a test asks for leniency,
and what runs keep on this machine goes to the test's own folder.

The SDK's default is lenient (an odd field is kept raw in ``undecoded``); here any drift
between the sandbox, the OpenAPI document and the models fails loudly instead. Tests of
the lenient mode pass ``decoding="lenient"`` themselves.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def strict_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHIPPING_DECODING", "strict")


@pytest.fixture(autouse=True)
def private_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The PostgreSQL journal's sent marks of the commands (and their child processes).
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
