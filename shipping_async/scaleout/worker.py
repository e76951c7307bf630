"""Moved to :mod:`shipping_async.bulk.worker` (one engine for every journal); kept importable."""

from shipping_async.bulk.worker import SharedJournal, Worker

__all__ = ["SharedJournal", "Worker"]
