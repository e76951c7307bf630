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


def test_the_command_line_starts_without_collecting_and_leaves_the_collector_as_it_was() -> None:
    """Start-up (the imports, the parser) runs with the collector off: in a fresh process
    no collection happens while `bulk` loads everything it runs on."""
    import subprocess
    import sys

    probe = (
        "import gc\n"
        "from shipping_async.cli import main\n"
        "seen = []\n"
        "gc.callbacks.append(lambda phase, info: phase == 'start' and seen.append(info))\n"
        "try:\n"
        "    main(['bulk', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "import sys\n"
        "assert 'aiohttp' in sys.modules\n"
        "print(len(seen), gc.isenabled())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split()[-2:] == ["0", "True"]


def test_an_in_process_command_leaves_the_collector_enabled_and_nothing_frozen() -> None:
    from shipping_async.cli import main

    assert main(["sandbox", "--speed", "0"]) == 2
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
