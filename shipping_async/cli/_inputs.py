"""A run's input file as jobs: fed with each key checked once, or enqueued in a shared journal.

- :class:`InputCheck` (``bulk`` on a journal file): the jobs as they are read, a key used
  twice refused naming both lines, and the rows that never became jobs counted for the
  summary.
- :func:`enqueue` (``bulk`` on a shared journal): the jobs added in chunks; an invalid
  row or a key already used by a different job is reported and left out.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any

from shipping_async.cli._terminal import printable

__all__ = ["InputCheck", "enqueue"]

#: Jobs added to a shared journal per call.
_CHUNK = 500


class InputCheck:
    """The input's jobs, with a key used twice refused naming both lines, and the count
    of rows that never became jobs (for the summary)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.failed = 0
        self._lines: dict[str, int] = {}

    def jobs(self) -> Any:
        from shipping_async.bulk.jobs import InvalidJob
        from shipping_async.bulk.readers import read_numbered_jobs

        for line, item in read_numbered_jobs(self.path):
            first = self._lines.setdefault(item.key, line)
            if first != line and not isinstance(item, InvalidJob):
                item = InvalidJob(
                    key=item.key,
                    row=line,
                    error=f"key {item.key!r} appears twice in the input, on lines {first} "
                    f"and {line}; each job needs its own",
                )
            yield item

    async def counted(self, results: AsyncIterator[Any]) -> AsyncIterator[Any]:
        from shipping_async.bulk.results import ResultStatus, Stage

        async for result in results:
            if result.stage is Stage.INPUT and result.status is ResultStatus.FAILED:
                self.failed += 1
            yield result


async def enqueue(journal: Any, path: str) -> list[str]:
    """Add the input's jobs to the journal (known keys keep their progress); their keys."""
    from shipping_async.bulk.jobs import InvalidJob, ShipmentJob
    from shipping_async.bulk.readers import count_rows, read_jobs

    count_rows(path)  # a file that cannot be read stops here, before any job is added
    keys: list[str] = []
    chunk: list[ShipmentJob] = []
    invalid = 0
    for item in read_jobs(path):
        if isinstance(item, InvalidJob):
            invalid += 1
            line = f"failed {item.key} row={item.row} error={item.error}"
            print(printable(line), file=sys.stderr)
            continue
        chunk.append(item)
        if len(chunk) >= _CHUNK:
            keys += await _add(journal, chunk)
            chunk = []
    keys += await _add(journal, chunk)
    print(f"{len(keys)} shipments in the journal ({invalid} invalid rows)", flush=True)
    return keys


async def _add(journal: Any, jobs: list[Any]) -> list[str]:
    keys = []
    for job, record in zip(jobs, await journal.add(jobs), strict=True):
        if record.job != job:
            print(
                f"failed {printable(job.key)}: key already used by a different job",
                file=sys.stderr,
            )
        else:
            keys.append(job.key)
    return keys
