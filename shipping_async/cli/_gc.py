"""Garbage collection for a long run: the objects every job makes are not scanned as young.

CPython collects its youngest generation every 700 container objects allocated (net of
those freed). A job's objects (its records, coroutines, futures, answers) live for the
job's few hundred milliseconds, so each collection finds most of them alive, scans
them, and moves them on to older generations to be scanned again, only for reference
counting to free them when the job ends. Timed with ``gc.callbacks`` in the worker of
``benchmarks/many_accounts.py``: 750 young, 69 middle and 6 full collections for 2,000
jobs, 0.17 ms of CPU per job in ``bulk`` and 0.33 ms in a PostgreSQL + Redis worker.

So a run collects its youngest generation every :data:`YOUNG` allocations instead
(reference cycles, rare in the run's code, wait that much longer to be freed), and
:func:`freeze_start_up` moves what start-up made (modules, classes, the run's clients)
out of the collector's sight, so that the rare full collection scans only what the run
made since. Only for the length of a ``bulk`` or ``worker`` run (:func:`long_run`):
the library never touches the process's collector.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["YOUNG", "freeze_start_up", "long_run"]

#: Container allocations (net of frees) between two collections of the young generation:
#: the live objects of ~100 jobs in flight are a few thousand; CPython's default is 700.
YOUNG = 20_000


@contextlib.contextmanager
def long_run() -> Iterator[None]:
    """Collect the young generation every :data:`YOUNG` allocations (the older ones as
    before) until the block ends; then the collector is as it was, nothing frozen."""
    before = gc.get_threshold()
    gc.set_threshold(YOUNG, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def freeze_start_up() -> None:
    """Leave every object alive now out of later collections (start-up is over). No
    collection first: it would cost more than the little garbage start-up leaves."""
    gc.freeze()
