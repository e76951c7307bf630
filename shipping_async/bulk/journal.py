"""The journal protocol: job states committed before each next step, nothing lost or twice.

A job moves through these states; each move is one committed write::

    PENDING --quote, begin_order--> ORDERING --201--> ORDERED --waybill--> WAYBILLED
      ^  |                             ^  |                          --pickup--> DONE
      |  | quoted, not sent at once    |  +--no answer / crash--> UNKNOWN
      |  v                             |  +--refused (4xx)------> FAILED
      +-QUOTED -----begin_order--------+  +--429, 400: withdraw_order--> QUOTED
    estimate
    expired

The intent (``begin_order``, durable before POST /orders) records the quote's facts
along with it: a job whose order is sent right after its quote needs no write of its
own for the quote. ``QUOTED`` is written when the order is not sent at once (withdrawn
after a 429 or a refusal, the run stopping between the quote and the order); a crash
between a quote and its intent leaves the job ``PENDING``, to be quoted again.

``FAILED`` keeps the ids reached so far (a failed waybill keeps its ``order_id``), so a
retry continues after the last step that succeeded and never orders twice. ``UNKNOWN``
means POST /orders may have created an order that we have no id for: such a job is
never sent again until :meth:`Journal.reconcile` says what happened to it.

Workers own jobs through leases, and every lease is fenced by a *claim token*.
:meth:`Journal.claim` hands out jobs for ``lease`` seconds, each with a token that is new
for that claim (:attr:`JobRecord.claim_token`). Every write names the token and fails with
:class:`LeaseLostError` unless it is still the job's current one, so a task whose claim
went stale - its lease lapsed and somebody, even the same worker, claimed the job again -
can change nothing, and (the intent being a fenced write) sends nothing. A worker renews
its leases while it works; a renewal also takes back a lapsed lease that nobody claimed
since (the token still matches, so nobody else can have acted). A job found in
``ORDERING`` whose lease ran out had its worker die between writing the intent and
reading the answer: ``claim`` moves it to ``UNKNOWN`` (dropping the token) instead of
handing it out.

:class:`Journal` is the protocol; ``SQLiteJournal`` (one process, a file) implements it
here, and a PostgreSQL store for many workers implements the same methods with
``SELECT ... FOR UPDATE SKIP LOCKED`` in ``claim`` and the move into ``ORDERING`` of
``begin_order`` as one ``UPDATE ... WHERE state IN ('pending', 'quoted') AND claim_token =
$token AND lease_until > now()`` (the order step claimed and the intent recorded in one
transaction).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from datetime import date, datetime, time
from decimal import Decimal
from enum import StrEnum
from typing import Protocol, TypedDict, Unpack, runtime_checkable

import msgspec

from shipping_async.bulk.jobs import ShipmentJob

__all__ = [
    "FINISHED_STATES",
    "WORKABLE_STATES",
    "JobFields",
    "JobRecord",
    "JobState",
    "Journal",
    "JournalDataError",
    "JournalError",
    "JournalStateError",
    "JournalUnavailableError",
    "LeaseLostError",
]


class JobState(StrEnum):
    """Where a job stands. The order of the first six is the order of the stages."""

    PENDING = "pending"  # known, nothing done
    QUOTED = "quoted"  # estimate chosen; re-quoted if it expires before ordering
    ORDERING = "ordering"  # intent recorded: POST /orders may be on the wire
    ORDERED = "ordered"  # the order exists: order_id is set
    WAYBILLED = "waybilled"  # a waybill per leg
    DONE = "done"  # pickup booked: finished
    FAILED = "failed"  # finished with an error at error_stage (see retryable)
    UNKNOWN = "unknown"  # order outcome unknown: reconcile before anything else


#: States a worker may claim and continue from (``FAILED`` too when retrying).
WORKABLE_STATES = frozenset(
    {JobState.PENDING, JobState.QUOTED, JobState.ORDERED, JobState.WAYBILLED}
)
#: States in which a run reports the job and leaves it alone.
FINISHED_STATES = frozenset({JobState.DONE, JobState.FAILED, JobState.UNKNOWN})


class JournalError(Exception):
    """The journal refused a write."""


class LeaseLostError(JournalError):
    """The worker no longer holds the job's lease: it must stop working on the job."""


class JournalStateError(JournalError):
    """The job is not in a state that allows this move (e.g. ``begin_order`` twice)."""


class JournalUnavailableError(JournalError):
    """The journal's store stayed unreachable longer than the run may wait
    (``--max-store-outage``): the run stops; what it could not write is left to the next."""


class JournalDataError(JournalError):
    """A stored job cannot be read (an unknown state, a job that is not JSON, a file that is
    not a journal): the journal is damaged or was written by another program."""


class JobFields(TypedDict, total=False):
    """The facts a state change may add to a job record (all optional)."""

    quote_id: int | None
    estimate_id: int | None
    carrier: str | None
    service: str | None
    cost: Decimal | None
    currency: str | None
    hub: bool
    order_id: int | None
    waybills: list[str | None]
    pickup_confirmation: str | None
    pickup_date: date | None
    pickup_from: time | None
    pickup_to: time | None
    error: str | None
    error_stage: str | None
    retryable: bool
    #: How an unknown order was settled from evidence (see :mod:`shipping_async.bulk.reconcile`).
    evidence: str | None


class JobRecord(msgspec.Struct, kw_only=True, frozen=True):
    """A job as the journal holds it: the job, its state, and everything reached so far."""

    key: str
    job: ShipmentJob
    state: JobState
    account: str = ""
    quote_id: int | None = None
    estimate_id: int | None = None
    carrier: str | None = None
    service: str | None = None
    cost: Decimal | None = None
    currency: str | None = None
    hub: bool = False
    order_id: int | None = None
    waybills: list[str | None] = msgspec.field(default_factory=list)
    pickup_confirmation: str | None = None
    pickup_date: date | None = None
    pickup_from: time | None = None
    pickup_to: time | None = None
    error: str | None = None
    error_stage: str | None = None
    retryable: bool = False
    evidence: str | None = None
    attempts: int = 0  # how many times the job was claimed
    lease_owner: str | None = None
    claim_token: str | None = None  # new for every claim; every write must name it
    lease_until: datetime | None = None
    # When begin_order last committed: real wall-clock time (UTC) on the store's clock
    # (the database's now(), the host's for a file), never a sandbox's scaled clock.
    order_intent_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def finished(self) -> bool:
        """True in ``DONE``, ``FAILED`` and ``UNKNOWN``."""
        return self.state in FINISHED_STATES

    @property
    def next_stage(self) -> JobState:
        """The last step this job reached safely, from which work continues.

        ``FAILED`` continues after its last success: with waybills from the pickup
        (``WAYBILLED``), with an order from the waybill (``ORDERED``), else from scratch.
        """
        if self.state is not JobState.FAILED:
            return self.state
        if self.order_id is None:
            return JobState.PENDING
        return JobState.WAYBILLED if self.waybills else JobState.ORDERED


@runtime_checkable
class Journal(Protocol):
    """Where job states live. Every method commits durably before it returns.

    Workers name themselves with a ``worker_id`` (unique per process and run) and work
    only on jobs they have claimed, writing under each claim's token. Times (``lease``)
    are seconds; the store measures leases on its own clock (the database's ``now()``
    for a shared store).
    """

    async def add(self, jobs: Sequence[ShipmentJob]) -> list[JobRecord]:
        """Record new jobs as ``PENDING``; keys already known are left as they are.

        Returns each job's current record, in the order given: a new job's, or the one
        stored under its key by an earlier run (whose state resume starts from).
        """
        ...

    async def claim(
        self,
        worker_id: str,
        *,
        lease: float,
        limit: int,
        keys: Sequence[str] | None = None,
        account: str | None = None,
        retry_failed: bool = False,
        exclude: Collection[str] = (),
        accounts: Mapping[str, int] | None = None,
    ) -> list[JobRecord]:
        """Lease up to ``limit`` workable jobs to ``worker_id`` for ``lease`` seconds.

        Workable: in :data:`WORKABLE_STATES` (and ``FAILED`` with ``retryable`` when
        ``retry_failed``), not leased to a live worker. ``keys`` restricts the claim to
        those jobs (a streaming worker claims what it just added); ``account`` to one
        account's jobs; ``accounts`` (account -> how many) to at most that many jobs of
        each account named, in one call (a worker's claim spread fairly over its
        accounts); ``exclude`` leaves out jobs the caller is still working on (one task
        per job in a process). First, jobs in ``ORDERING`` whose lease expired move
        to ``UNKNOWN``. Every claimed record carries a new :attr:`~JobRecord.claim_token`.
        Claimed ``FAILED`` jobs come back in their :attr:`~JobRecord.next_stage` with the
        error cleared.
        """
        ...

    async def renew(self, claims: Mapping[str, str], *, lease: float) -> set[str]:
        """Extend the leases of ``claims`` (key -> claim token); returns the keys still held.

        A lease that lapsed is taken back when its token is still the job's (nobody
        claimed the job since); a job claimed again by anyone is not.
        """
        ...

    async def record(
        self, token: str, key: str, state: JobState, **fields: Unpack[JobFields]
    ) -> JobRecord:
        """Commit a move to a non-terminal state with the facts it adds.

        Raises :class:`LeaseLostError` unless ``token`` is the job's current claim token.
        ``ORDERING`` is reached through :meth:`begin_order` only; terminal states through
        :meth:`finish`.
        """
        ...

    async def begin_order(
        self,
        token: str,
        key: str,
        *,
        quote_id: int,
        estimate_id: int,
        quote: JobFields | None = None,
    ) -> JobRecord:
        """Record the intent to POST /orders (into ``ORDERING``); durable on return.

        ``quote_id`` and ``estimate_id`` name the estimate ordered; ``quote`` adds the
        facts of a quote made just now and not recorded (carrier, service, cost,
        currency, hub), written with the intent. Only from ``PENDING`` or ``QUOTED``
        (:class:`JournalStateError` otherwise) and only under the current claim with its
        lease live (:class:`LeaseLostError`). Write it when the order's permit is
        granted, then call :meth:`sending` and send at once; never the other way round.
        Intents that arrive together may share one commit.
        """
        ...

    def sending(self, key: str) -> None:
        """The intent of ``key`` is committed and its request's first byte follows at once,
        with nothing run in between.

        A store that tells a killed run's unsent intents apart from those on the wire
        notes it here (the SQLite journal's sent marks); :class:`JournalError` when it
        cannot: then nothing is sent.
        """
        ...

    async def withdraw_order(self, token: str, key: str) -> JobRecord:
        """Take the intent back (``ORDERING -> QUOTED``): the answer proved no order exists.

        For a 429, a refusal or a connection that never opened, before the job waits or
        fails. Fenced like every write.
        """
        ...

    async def finish(
        self, token: str, key: str, state: JobState, **fields: Unpack[JobFields]
    ) -> JobRecord:
        """Commit a terminal state (``DONE``, ``FAILED``, ``UNKNOWN``) and drop the lease."""
        ...

    async def release(self, claims: Mapping[str, str]) -> None:
        """Give leases (key -> claim token) back untouched: the jobs stay claimable."""
        ...

    async def reconcile(
        self, key: str, *, order_id: int | None, evidence: str | None = None
    ) -> JobRecord:
        """Settle an ``UNKNOWN`` job with what the caller found out.

        ``order_id`` given: the order exists, the job continues at ``ORDERED``.
        ``None``: the caller made sure no order was created; the job goes back to
        ``PENDING`` and will be quoted and ordered again. Either way unleased.
        ``evidence`` says how it was found out (kept on the record).
        """
        ...

    async def get(self, key: str) -> JobRecord | None:
        """The record of one job, or ``None``."""
        ...

    def records(self, *, states: Collection[JobState] | None = None) -> AsyncIterator[JobRecord]:
        """Every record (in ``states`` if given), streamed in the order jobs were added."""
        ...

    async def order_intent_ages(self, *, within: float, account: str | None = None) -> list[float]:
        """How many real seconds ago each order intent of the last ``within`` seconds was
        recorded (of ``account``'s jobs if given), measured on the store's own clock.

        A run that starts holds an order permit for each (see
        :meth:`~shipping_async.limiter.RemembersSent.remember_sent`): whatever the
        previous process sent still counts in the server's window. An intent later
        withdrawn or answered still counts: the request may have reached the server.
        """
        ...

    async def needs_reconciliation(self) -> list[JobRecord]:
        """Jobs in ``UNKNOWN``: an order may exist that the journal has no id for."""
        ...

    async def counts(self) -> dict[JobState, int]:
        """How many jobs are in each state (every state present, zeros included)."""
        ...

    async def close(self) -> None:
        """Release the store; the journal is unusable afterwards."""
        ...
