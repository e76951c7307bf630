"""What a killed run had really sent: a mark per order, written right before its first byte.

An order intent committed to SQLite is visible to the next process as soon as its WAL
frames are written (to the page cache), before the commit's fsync returns; the request
is written only after that fsync. A SIGKILL during the fsync therefore leaves an intent
that was never sent, which a resumed run could only list as ``unknown``.

The mark tells the two apart. Right after the intent's commit (fsync done) and right
before the request is written, one line ``[key, intent stamp]`` is appended to the file
``<journal>-sent``, without fsync: a killed process's writes stay in the page cache, so
the next run on the same boot reads every mark its predecessor wrote. An intent without
its mark was never sent, and goes back to ``quoted`` to be sent again. After a reboot
(another ``/proc/sys/kernel/random/boot_id``), on a system without boot ids, or when the
file does not belong to the journal's last run (a journal restored from a backup, the
file lost or copied apart), nothing is concluded: every open intent stays ``unknown``.

The file's first line names the run that wrote it and the boot it ran on; the journal
records the same pair when it is opened (``meta`` table), so that a file is used only
with the journal state it was written beside.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from shipping_async.bulk.journal import JournalError

__all__ = ["SentMarks", "boot_id", "mark_sent", "previous_marks"]

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_ENCODER = msgspec.json.Encoder()
_HEADER = msgspec.json.Decoder(dict[str, str])
_LINE = msgspec.json.Decoder(tuple[str, str])
#: The most of a previous file read (a mark is under 200 bytes; 5 MiB is 25,000 orders).
_MAX_BYTES = 5 * 1024 * 1024


def boot_id() -> str | None:
    """This boot's id (Linux), or ``None`` where there is none to read."""
    try:
        return _BOOT_ID.read_text().strip() or None
    except OSError:
        return None


@dataclass(frozen=True, slots=True)
class PreviousMarks:
    """A previous run's marks file: who wrote it, on which boot, and its marks."""

    run: str
    boot: str
    marks: frozenset[tuple[str, str]] = field(default_factory=frozenset)
    #: The whole header (``run``, ``boot`` and what else its writer put there).
    header: dict[str, str] = field(default_factory=dict)


def previous_marks(path: str) -> PreviousMarks | None:
    """The marks file at ``path``, or ``None`` when there is none or it cannot be read.

    A torn last line (the process died inside its write) is no mark: that request was
    not sent, since it is written only once the mark's write has returned.
    """
    try:
        with open(path, "rb") as file:
            data = file.read(_MAX_BYTES + 1)
    except OSError:
        return None
    if len(data) > _MAX_BYTES:
        return None  # too large to be ours: conclude nothing
    lines = data.split(b"\n")
    try:
        header = _HEADER.decode(lines[0])
        run, boot = header["run"], header["boot"]
    except (msgspec.DecodeError, msgspec.ValidationError, KeyError):
        return None
    marks: set[tuple[str, str]] = set()
    for line in lines[1:]:
        try:
            marks.add(_LINE.decode(line))
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
    return PreviousMarks(run=run, boot=boot, marks=frozenset(marks), header=header)


class SentMarks:
    """This run's marks file: started empty (its header) when the journal is opened.

    Only the marks of intents still open matter to the next run; :meth:`answered` drops
    a job's mark from them, and once the file passes ``max_bytes`` it is rewritten with
    the open ones alone (a new file renamed over the old: a kill finds one or the
    other, each holding every open mark), so that a worker running for weeks keeps a
    small file.
    """

    __slots__ = ("_fd", "_fields", "_header", "_max_bytes", "_open", "_path", "_size")

    def __init__(
        self,
        path: str,
        *,
        run: str,
        boot: str,
        header: dict[str, str] | None = None,
        max_bytes: int = 1 << 20,
    ) -> None:
        self._path = path
        self._fields = {**(header or {}), "run": run, "boot": boot}
        self._header = _ENCODER.encode(self._fields) + b"\n"
        self._max_bytes = max_bytes
        self._open: dict[str, bytes] = {}  # key -> its mark, for intents not yet answered
        self._fd = self._start(path)

    def note(self, key: str, stamp: str) -> None:
        """The intent stamped ``stamp`` of job ``key`` is committed; its request goes next."""
        line = _ENCODER.encode((key, stamp)) + b"\n"
        self._write(line)
        self._open[key] = line
        if self._size > self._max_bytes:
            self._rewrite()

    def set_header(self, **fields: str) -> None:
        """Put ``fields`` in the header: the file is rewritten (renamed over the old one,
        so a kill finds the old header or the new, each with every open mark)."""
        self._fields.update(fields)
        self._header = _ENCODER.encode(self._fields) + b"\n"
        self._rewrite()

    def answered(self, key: str) -> None:
        """Job ``key`` left its intent (answered, withdrawn): its mark matters no more."""
        self._open.pop(key, None)

    def close(self) -> None:
        os.close(self._fd)

    def _start(self, path: str) -> int:
        """A file at ``path`` holding the header and the open marks; its descriptor."""
        # Readable by its owner only, like the journal (keys are customer references).
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        data = self._header + b"".join(self._open.values())
        try:
            if os.write(fd, data) != len(data):
                raise OSError("short write to the sent-marks file")
        except BaseException:
            os.close(fd)
            raise
        self._size = len(data)
        return fd

    def _rewrite(self) -> None:
        fresh = f"{self._path}.new"
        fd = self._start(fresh)
        try:
            os.replace(fresh, self._path)
        except BaseException:
            os.close(fd)
            raise
        old, self._fd = self._fd, fd
        os.close(old)

    def _write(self, data: bytes) -> None:
        # One write() each: a kill lands before it, after it, or (torn) inside it.
        if os.write(self._fd, data) != len(data):
            raise OSError("short write to the sent-marks file")
        self._size += len(data)


def mark_sent(note: Callable[[str, str], None], unsent: dict[str, str], key: str) -> None:
    """Note the mark of ``key``'s intent, taken from ``unsent`` (key -> intent stamp)
    with ``note``, right before its request's first byte; :class:`JournalError` when
    there is no such intent or the mark cannot be written (then nothing is sent)."""
    stamp = unsent.pop(key, None)
    if stamp is None:
        raise JournalError(f"job {key!r}: no order intent of this process waits to be sent")
    try:
        note(key, stamp)
    except OSError as exc:
        raise JournalError(
            f"cannot write the journal's sent marks ({exc.strerror or exc}); "
            f"job {key!r} was not sent"
        ) from None
