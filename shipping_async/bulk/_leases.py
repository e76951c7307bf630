"""The runner's leases: the claims it holds, their renewal, and settling a job that crashed.

Every job the runner works on is held under one claim (its token, see
:mod:`shipping_async.bulk.journal`). :class:`Claims` keeps them; :meth:`Claims.heartbeat`
renews them all in one journal call every third of the lease, as a side task that the
runner watches (it never fails silently: a renewal that errs is logged, and the next beat
tries again while the lease has slack). A renewal also takes back a lease that lapsed
while nobody claimed the job since; a job claimed again by somebody else is left to its
task, which finds its next write refused and stops quietly.
"""

from __future__ import annotations

import logging

from shipping_async.bulk.journal import JobRecord, JobState, Journal, LeaseLostError
from shipping_async.bulk.results import Stage
from shipping_async.clock import Clock

__all__ = ["NEXT_STAGE", "Claims", "settle_crash"]

_log = logging.getLogger("shipping_async.bulk.runner")

#: The stage a job in each state goes on with (where a crash in it is reported).
NEXT_STAGE = {
    JobState.PENDING: Stage.QUOTE,
    JobState.QUOTED: Stage.ORDER,
    JobState.ORDERING: Stage.ORDER,
    JobState.ORDERED: Stage.WAYBILL,
    JobState.WAYBILLED: Stage.PICKUP,
}


class Claims:
    """The claims one runner holds (key -> claim token), and their renewal."""

    __slots__ = ("_clock", "_held", "_journal", "_lease", "_live_until")

    def __init__(self, journal: Journal, clock: Clock, lease: float) -> None:
        self._journal = journal
        self._clock = clock
        self._lease = lease  # seconds of the clock
        self._held: dict[str, str] = {}
        # When (clock.monotonic) each lease runs out at the earliest: the store set it to
        # "its now + lease" at a moment after we asked, so "asked + lease" is a floor.
        self._live_until: dict[str, float] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._held

    def __len__(self) -> int:
        return len(self._held)

    def keys(self) -> list[str]:
        return list(self._held)

    def hold(self, record: JobRecord, *, asked_at: float) -> None:
        """Keep ``record``'s claim, granted by a claim call made at ``asked_at``."""
        assert record.claim_token is not None
        self._held[record.key] = record.claim_token
        self._live_until[record.key] = asked_at + self._lease

    def drop(self, key: str) -> None:
        self._held.pop(key, None)
        self._live_until.pop(key, None)

    def surely_live(self, key: str) -> bool:
        """Whether ``key``'s lease has at least half its length left for sure: then nobody
        else can have claimed the job, and a fence before a request needs no round trip."""
        until = self._live_until.get(key)
        return until is not None and self._clock.monotonic() < until - self._lease / 2

    def renewed(self, key: str, *, asked_at: float) -> None:
        """``key``'s lease was renewed by a call made at ``asked_at``."""
        if key in self._held:
            self._live_until[key] = asked_at + self._lease

    async def heartbeat(self) -> None:
        """Renew every held lease every third of the lease, until cancelled."""
        while True:
            await self._clock.sleep(self._lease / 3)
            claims = dict(self._held)
            if not claims:
                continue
            asked_at = self._clock.monotonic()
            try:
                held = await self._journal.renew(claims, lease=self._lease)
            except Exception as exc:  # the next beat tries again; the lease has slack
                _log.warning("could not renew %d leases (%s); retrying", len(claims), exc)
                continue
            for key in held:
                if self._held.get(key) == claims[key]:
                    self.renewed(key, asked_at=asked_at)
            # A lease claimed again elsewhere is not renewed; its task finds its next
            # write refused and says so once (INFO, with the key).


async def settle_crash(journal: Journal, record: JobRecord, exc: Exception) -> JobRecord | None:
    """Record a job whose task failed unexpectedly: ``FAILED`` at its next stage, or
    ``UNKNOWN`` when it was ordering (the order may exist).

    Re-reads the job first: a created order is never turned into a failure, and a claim
    gone stale settles nothing (``None``: the job belongs to a later claim).
    """
    current = await journal.get(record.key)
    if current is None or current.claim_token != record.claim_token:
        return None
    assert record.claim_token is not None
    # Ordering: the order may have been sent.
    state = JobState.UNKNOWN if current.state is JobState.ORDERING else JobState.FAILED
    try:
        return await journal.finish(
            record.claim_token,
            record.key,
            state,
            error=f"unexpected {type(exc).__name__}: {exc}",
            error_stage=NEXT_STAGE.get(current.state, Stage.QUOTE).value,
        )
    except LeaseLostError:
        return None
