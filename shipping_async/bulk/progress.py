"""Live counts of a run, for a progress display: jobs per state and order times."""

from __future__ import annotations

from collections import Counter, deque

from shipping_async.bulk.journal import FINISHED_STATES, JobRecord, JobState

__all__ = ["RunProgress"]

_ORDERING, _ORDERED, _FAILED = JobState.ORDERING, JobState.ORDERED, JobState.FAILED


class RunProgress:
    """Live counts of a run, for a progress display: jobs per state and order times."""

    def __init__(self) -> None:
        # Every state present from the start: a count moves without Counter.__missing__.
        self.states: Counter[JobState] = Counter(dict.fromkeys(JobState, 0))  # current state
        self.reached: Counter[JobState] = Counter(dict.fromkeys(JobState, 0))  # reached
        self.resumed = 0  # finished by an earlier run, only reported
        self.invalid = 0
        self.failed_unordered = 0  # failed before an order existed
        self.order_times: deque[float] = deque(maxlen=256)  # monotonic, ORDERED moves
        self._where: dict[str, JobState] = {}

    def observe(self, record: JobRecord, now: float) -> None:
        """Count one committed state change (once per write of every job: kept lean)."""
        state, key, where, states = record.state, record.key, self._where, self.states
        before = where.get(key)
        if before is not None:
            states[before] -= 1
        states[state] += 1
        self.reached[state] += 1
        if state in FINISHED_STATES:
            where.pop(key, None)
            if state is _FAILED and record.order_id is None:
                self.failed_unordered += 1
        else:
            where[key] = state
            if state is _ORDERED and before is _ORDERING:
                self.order_times.append(now)

    def forget(self, key: str) -> None:
        """A job left this run unfinished (stopped)."""
        before = self._where.pop(key, None)
        if before is not None:
            self.states[before] -= 1

    @property
    def in_flight(self) -> int:
        """Jobs claimed by this run and not finished."""
        return len(self._where)
