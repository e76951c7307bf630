"""The end of a ``bulk`` or ``worker`` run: what it prints and the one exit-code table.

0 every job (of the batch, or for a worker of the journal) done; 1 some failed, unknown
or not finished (the summary says how to continue); 2 bad arguments or setup; 130
interrupted. The summaries live with the table because they decide which code applies.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from shipping_async.bulk.journal import FINISHED_STATES, JobState
from shipping_async.cli._common import drain
from shipping_async.cli._terminal import without_password

if TYPE_CHECKING:
    from shipping_async.cli._run import RunPlan

__all__ = [
    "INCOMPLETE",
    "INTERRUPTED",
    "OK",
    "SETUP",
    "batch_summary",
    "exit_code",
    "journal_summary",
    "report_batch",
    "resume_command",
]

OK, INCOMPLETE, SETUP, INTERRUPTED = 0, 1, 2, 130

#: Unfinished states whose order exists (or may): they go on only where it was created.
_PAST_THE_ORDER = (JobState.ORDERING, JobState.ORDERED, JobState.WAYBILLED, JobState.UNKNOWN)


def exit_code(*, stopped: bool, not_done: int) -> int:
    """The one exit-code table of ``bulk`` and ``worker`` (setup errors are ``SETUP``)."""
    if stopped:
        return INTERRUPTED
    return INCOMPLETE if not_done else OK


def resume_command(plan: RunPlan, path: str) -> str:
    """The command that continues a fed batch: the same words, with the journal ``path``
    named and ``--resume`` (flags in their ``--name=value`` form too)."""
    words = list(getattr(plan.args, "argv", None) or ["bulk", plan.input or ""])
    words = [word for word in words if word != "--resume"]
    if not any(word == "--journal" or word.startswith("--journal=") for word in words):
        words += ["--journal", path]
    return shlex.join(["shipping-async", *words, "--resume"])


async def batch_summary(
    journal: Any, plan: RunPlan, path: str, *, stopped: bool, bad: int, invalid: int = 0
) -> int:
    """After a fed batch on the journal file ``path``: its counts, how to continue; the code."""
    counts = await journal.counts()
    line = ", ".join(f"{state.value} {n}" for state, n in counts.items() if n)
    if invalid:  # rows that never became jobs (bad fields, a key used twice)
        line = f"{line}, invalid input {invalid}" if line else f"invalid input {invalid}"
    where = "temporary journal" if plan.sandbox and not plan.journal else path
    print(f"{where}: {line or 'empty'}", flush=True)
    left = sum(n for state, n in counts.items() if state not in FINISHED_STATES)
    ordered = sum(counts[state] for state in _PAST_THE_ORDER)
    if plan.sandbox and (stopped or left) and (not plan.journal or ordered):
        # The embedded sandbox's orders are gone with this process: a job past its
        # order cannot go on in a new one, and a temporary journal is gone too.
        why = (
            "its journal was temporary (add --journal FILE to keep one)"
            if not plan.journal
            else f"{ordered} of its shipments were ordered in that sandbox"
        )
        print(
            "the embedded sandbox ended with this run, so this batch cannot be resumed: "
            f"{why}; run the batch again",
            flush=True,
        )
        return exit_code(stopped=stopped, not_done=bad + left)
    if counts[JobState.UNKNOWN]:
        print(
            f"{counts[JobState.UNKNOWN]} order outcome(s) unknown: find them, then "
            f"{resume_command(plan, path)} --reconcile FILE (see shipping-async bulk --help)",
            flush=True,
        )
    if stopped:
        print(f"interrupted; to continue: {resume_command(plan, path)}", flush=True)
    left = sum(n for state, n in counts.items() if state not in FINISHED_STATES)
    if left and not stopped:  # let go unfinished (a lease lost): never "all done"
        print(
            f"{left} shipment(s) not finished; to continue: {resume_command(plan, path)}",
            flush=True,
        )
    return exit_code(stopped=stopped, not_done=bad + left)


async def report_batch(journal: Any, keys: list[str], *, out: str | None) -> int:
    """After a bulk run on a shared journal: the input's results from the journal (others
    may have shipped some of them); the number not done."""
    from shipping_async.bulk.results import ShipmentResult

    wanted = set(keys)

    async def results() -> AsyncIterator[ShipmentResult]:
        async for record in journal.records():
            if record.key in wanted:
                yield ShipmentResult.from_record(record)

    return await drain(results(), None, out=out)


async def journal_summary(
    journal: Any, plan: RunPlan, *, stopped: bool, bad: int, batch: bool
) -> int:
    """After draining a shared journal: its status, how to continue; the code."""
    from shipping_async.cli.status import print_status

    await print_status(journal, sys.stdout)
    if stopped:
        print("stopped; run a worker again to continue", flush=True)
        return INTERRUPTED
    counts = await journal.counts()
    left = sum(n for state, n in counts.items() if state not in FINISHED_STATES)
    if left:  # claimed elsewhere and not finished yet, or let go by this worker
        journal_url = without_password(plan.journal or "")
        print(
            f"{left} job(s) not finished; run a worker again to continue "
            f"(shipping-async worker --journal {journal_url})",
            flush=True,
        )
    # 0 only when every job of the journal (or of the batch, for bulk) is done.
    not_done = bad if batch else sum(counts.values()) - counts[JobState.DONE]
    return exit_code(stopped=False, not_done=not_done + left + counts[JobState.UNKNOWN])
