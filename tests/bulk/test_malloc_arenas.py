"""The command line caps glibc's malloc arenas: threads do not each grow memory of their own.

In a fresh interpreter (arenas are per process), six threads alive at once each allocate;
``malloc_stats()`` then lists the arenas. Without the cap each thread gets one (seven).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent(
    """
    import ctypes, sys, threading
    from shipping_async.cli._malloc import few_arenas
    if sys.argv[1] == "capped":
        assert few_arenas()
    together = threading.Barrier(6)
    kept = []
    def allocate():
        together.wait()
        kept.append([bytearray(1000) for _ in range(2000)])
        together.wait()
    threads = [threading.Thread(target=allocate) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ctypes.CDLL(None).malloc_stats()
    """
)


def arenas(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, env=env, check=True
    )
    return sum(1 for line in done.stderr.splitlines() if line.startswith("Arena "))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's arenas")
def test_the_cap_keeps_threads_to_two_arenas() -> None:
    assert arenas("default") > 2  # the probe does grow one per thread without the cap
    assert arenas("capped") == 2


def test_malloc_arena_max_in_the_environment_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    from shipping_async.cli._malloc import few_arenas

    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert few_arenas() is False
