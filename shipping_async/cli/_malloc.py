"""Few malloc arenas for a long run: a worker's memory is its jobs', not its threads'.

glibc gives each thread that allocates an arena of its own (up to eight per core), and
memory freed in one arena serves only that arena. A run's threads (the SQLite journal's
writer, the resolver's) each grow one. The 80-172 MiB a 200-account SQLite worker once
seemed to peak at were the benchmark's own memory (``ru_maxrss`` after ``vfork``, see
``benchmarks/many_accounts.py``); measured as its own ``VmHWM`` it peaks at 59 MiB with
or without this cap. The cap stays as cheap insurance for long runs. Called once at the
start of the command line, before threads start; ``MALLOC_ARENA_MAX`` in the environment
still decides when it is set. Elsewhere than glibc (musl, macOS) nothing happens.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["ARENAS", "few_arenas"]

#: Two: the loop's thread and one for every other thread.
ARENAS = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter


def few_arenas(count: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas at ``count``; whether it was done."""
    if not sys.platform.startswith("linux") or "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, count))
