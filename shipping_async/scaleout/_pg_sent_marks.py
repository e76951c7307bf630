"""The PostgreSQL journal's sent marks: what a killed process of this machine had sent.

PostgreSQL commits an order intent before its answer reaches the process, and the order's
request is written only once that answer is in: a SIGKILL in between leaves an intent
that was never sent, which the next worker could only call ``unknown``. As with the
SQLite journal (:mod:`~shipping_async.bulk._sent_marks`, the same file format), each
process that opens the journal with a marks directory appends a mark ``[key, intent
stamp]`` right before each order's first byte, to a file of its own in a directory of
this machine: ``<journal>-<pid>-<run>.sent``. Its header names the boot, the process (pid
and start time), the journal (host, port, database and schema, hashed) and the worker ids
whose claims it makes, written before the first claim of each.

A later process of the same journal reads the files of processes that are gone (their
pid no longer runs, or runs another program started later) on this boot, in its pid
namespace (a container's pids mean nothing in another's). In a claim, a
lapsed intent leased to one of a gone process's workers, without that process's mark,
was never sent: it goes back to ``quoted``, to be ordered again. Every other intent is
left to become ``unknown`` as before: one with its mark, one whose process still runs,
one of another boot or another machine (its worker is in no file here). A gone process's
file is deleted once none of its workers' intents is open; a process that closes the
journal deletes its own. Files of other boots are deleted after :data:`_STALE_DAYS`, and
so are the files of other journals whose process is gone (a journal never opened again
would keep them): without its file, a lapsed intent is left to become ``unknown``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from shipping_async.bulk._sent_marks import SentMarks, boot_id, previous_marks

__all__ = ["LocalMarks", "default_directory", "journal_name"]

_log = logging.getLogger("shipping_async")

#: Days after which a marks file of another boot, or of a gone process of another journal,
#: is deleted (nothing can be read from the first on this boot; a directory shared by
#: several machines keeps theirs meanwhile).
_STALE_DAYS = 7


def default_directory() -> Path:
    """``$XDG_STATE_HOME/shipping-async/sent-marks`` (``~/.local/state`` without it)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "shipping-async" / "sent-marks"


def journal_name(dsn: str, schema: str) -> str:
    """A name for the journal at ``dsn`` and ``schema`` (host, port, database; never the
    user or password), fit for a file name."""
    parts = urlsplit(dsn)
    where = f"{parts.hostname or ''}:{parts.port or 5432}{parts.path}/{schema}"
    return hashlib.sha256(where.encode()).hexdigest()[:16]


def pid_namespace() -> str | None:
    """This process's pid namespace (a pid means something only within it)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot), or ``None`` if none runs."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
    except OSError:
        return None
    return fields[19].decode() if len(fields) > 19 else None


@dataclass(frozen=True, slots=True)
class _GoneProcess:
    path: Path
    workers: frozenset[str]
    marks: frozenset[tuple[str, str]]


class LocalMarks:
    """This process's marks file for one journal, and the files of its gone processes."""

    def __init__(self, marks: SentMarks, path: Path, gone: list[_GoneProcess]) -> None:
        self._marks = marks
        self._path = path
        self._workers: set[str] = set()
        self._gone = gone

    @classmethod
    def open(cls, directory: Path, journal: str) -> LocalMarks | None:
        """Start this process's file in ``directory`` (made private if missing) and read
        the gone processes' files; ``None`` where the system has no boot id."""
        boot, space = boot_id(), pid_namespace()
        start = process_start(os.getpid())
        if boot is None or space is None or start is None:
            return None
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        gone = _gone_processes(directory, journal, boot, space)
        run = uuid.uuid4().hex
        path = directory / f"{journal}-{os.getpid()}-{run}.sent"
        header = {"journal": journal, "pid": str(os.getpid()), "start": start, "workers": ""}
        header["pidns"] = space
        marks = SentMarks(str(path), run=run, boot=boot, header=header)
        return cls(marks, path, gone)

    @property
    def gone_workers(self) -> list[str]:
        """The workers of gone processes whose intents may still be open."""
        return sorted({worker for gone in self._gone for worker in gone.workers})

    def own(self, worker_id: str) -> None:
        """Name ``worker_id`` in the header before its first claim through this journal."""
        if worker_id not in self._workers:
            self._workers.add(worker_id)
            self._marks.set_header(workers=" ".join(sorted(self._workers)))

    def note(self, key: str, stamp: str) -> None:
        self._marks.note(key, stamp)

    def answered(self, key: str) -> None:
        self._marks.answered(key)

    def unsent(self, intents: Iterable[tuple[str, str, str]]) -> list[str]:
        """Of ``intents`` (key, lease owner, intent stamp), lapsed ones, the keys a gone
        process of this machine surely never sent: the files that name the owner (one,
        unless a process used a worker id through two journals) have no mark of it."""
        found: list[str] = []
        for key, owner, stamp in intents:
            named = [gone for gone in self._gone if owner in gone.workers]
            if named and all((key, stamp) not in gone.marks for gone in named):
                found.append(key)
        return found

    def settled(self, still_open: Iterable[str]) -> None:
        """Forget (and delete) the files of gone processes none of whose workers is among
        ``still_open`` (the owners of intents still open)."""
        busy = set(still_open)
        keep: list[_GoneProcess] = []
        for gone in self._gone:
            if gone.workers & busy:
                keep.append(gone)
            else:
                with contextlib.suppress(OSError):
                    gone.path.unlink()
        self._gone = keep

    def close(self) -> None:
        """Close and delete this process's file: its open intents are left to ``unknown``."""
        self._marks.close()
        with contextlib.suppress(OSError):
            self._path.unlink()


def _exited(header: dict[str, str]) -> bool:
    """Whether the process a file's header names (pid and start time, on this boot and in
    this pid namespace) has exited: its pid runs no more, or runs a later program."""
    pid, start = header.get("pid", ""), header.get("start")
    return pid.isdigit() and start is not None and process_start(int(pid)) != start


def _stale(path: Path) -> bool:
    try:
        return time.time() - path.stat().st_mtime > _STALE_DAYS * 86400
    except OSError:
        return False


def _gone_processes(directory: Path, journal: str, boot: str, space: str) -> list[_GoneProcess]:
    """The files of this journal's gone processes, read in one pass over ``directory``
    that also deletes the stale files no process here may still write: of another boot,
    or (another journal's) of a gone process of this boot and pid namespace."""
    gone: list[_GoneProcess] = []
    for path in directory.glob("*.sent"):
        ours = path.name.startswith(f"{journal}-")
        if not ours and not _stale(path):
            continue  # another journal's, recent: not even read
        previous = previous_marks(str(path))
        if previous is None:
            continue
        header = previous.header
        if previous.boot != boot:
            if _stale(path):
                with contextlib.suppress(OSError):
                    path.unlink()
            continue
        if header.get("pidns") != space or not _exited(header):
            continue  # still running (or unreadable), or a pid that means another process
        if not ours:
            with contextlib.suppress(OSError):
                path.unlink()
        elif header.get("journal") == journal:
            workers = frozenset(header.get("workers", "").split())
            gone.append(_GoneProcess(path, workers, previous.marks))
    if gone:
        _log.info("sent marks of %d process(es) gone on this machine: %s", len(gone), directory)
    return gone
