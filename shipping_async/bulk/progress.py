"""Live counts of a run, for a progress display: jobs per state and order times."""

from __future__ import annotations

from collections import Counter, deque

from shipping_async.bulk.journal import JobRecord, JobState

__all__ = ["RunProgress"]


class RunProgress:
    """Live counts of a run, for a progress display: jobs per state and order times."""

    def __init__(self) -> None:
        self.states: Counter[JobState] = Counter()  # jobs of this run by current state
        self.reached: Counter[JobState] = Counter()  # jobs that reached each state this run
        self.resumed = 0  # finished by an earlier run, only reported
        self.invalid = 0
        self.failed_unordered = 0  # failed before an order existed
        self.order_times: deque[float] = deque(maxlen=256)  # monotonic, ORDERED moves
        self._where: dict[str, JobState] = {}

    def observe(self, record: JobRecord, now: float) -> None:
        """Count one committed state change."""
        before = self._where.get(record.key)
        if before is not None:
            self.states[before] -= 1
        self.states[record.state] += 1
        self.reached[record.state] += 1
        if record.state is JobState.ORDERED and before is JobState.ORDERING:
            self.order_times.append(now)
        if record.state is JobState.FAILED and record.order_id is None:
            self.failed_unordered += 1
        if record.finished:
            self._where.pop(record.key, None)
        else:
            self._where[record.key] = record.state

    def forget(self, key: str) -> None:
        """A job left this run unfinished (stopped)."""
        before = self._where.pop(key, None)
        if before is not None:
            self.states[before] -= 1

    @property
    def in_flight(self) -> int:
        """Jobs claimed by this run and not finished."""
        return len(self._where)
