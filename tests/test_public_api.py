"""The public surface: every name in ``__all__`` exists, and the list stays sorted."""

from __future__ import annotations

import shipping_async


def test_all_is_sorted_and_unique() -> None:
    names = list(shipping_async.__all__)
    assert names == sorted(names)
    assert len(names) == len(set(names))


def test_every_exported_name_exists() -> None:
    missing = [name for name in shipping_async.__all__ if not hasattr(shipping_async, name)]
    assert missing == []


def test_no_private_name_is_exported() -> None:
    assert [
        name for name in shipping_async.__all__ if name.startswith("_") and name != "__version__"
    ] == []


def test_every_public_error_is_exported() -> None:
    from shipping_async import errors

    exported = set(shipping_async.__all__)
    assert [name for name in errors.__all__ if name not in exported] == []


def test_every_public_model_is_exported() -> None:
    from shipping_async import models

    internal = {
        "Model",
        "decoder",
        "validate_request",
        "ApiTimestamp",
        "ClockTime",
        "DayMonthYear",
        "HourMinute",
    }
    exported = set(shipping_async.__all__)
    assert [name for name in models.__all__ if name not in exported | internal] == []
