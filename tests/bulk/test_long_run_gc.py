"""A bulk or worker run tunes the garbage collector for its length only."""

from __future__ import annotations

import gc

from shipping_async.cli import _gc


def test_a_long_run_collects_its_young_objects_less_often_and_restores_the_collector() -> None:
    before = gc.get_threshold()
    with _gc.long_run():
        assert gc.get_threshold() == (_gc.YOUNG, *before[1:])
        _gc.freeze_start_up()
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
