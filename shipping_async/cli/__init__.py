"""The ``shipping-async`` command line: one subcommand per module of this package."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import importlib
import os
import sys
import threading
from collections.abc import Sequence

__all__ = ["main"]

# Each module exposes ``register(subparsers)``, which adds its parser and sets
# ``handler`` (a callable taking the parsed namespace and returning an exit code).
_COMMAND_MODULES = ("bulk", "journal", "reconcile", "sandbox", "status", "webhooks", "worker")
#: The commands whose process ends without tearing the interpreter down (see _end_now).
_RUNS = ("bulk", "worker")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or of ``command``'s alone: a command's module
    imports what it runs on (``webhooks`` a web server, ``sandbox`` the simulator), and
    a run of another command should not pay for loading it."""
    parser = argparse.ArgumentParser(
        prog="shipping-async", description="Shipping API SDK tools: sandbox, bulk shipping."
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMAND_MODULES if command is None else (command,):
        importlib.import_module(f"{__name__}.{name}").register(subparsers)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names, if it names one before any other word."""
    first = argv[0] if argv else None
    return first if first in _COMMAND_MODULES else None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code.

    A documented error that no subcommand handled (an unreadable input file, a damaged
    journal, a plain-http remote ``--base-url``) is a setup error: one line on stderr,
    exit code 2, no traceback.
    """
    # Start-up (the imports, the parser) makes the tens of thousands of modules, classes
    # and functions the process keeps to its end, and little garbage: each collection of
    # the young generation meanwhile scanned them again (76 in a bulk run's start-up,
    # ~20 ms of CPU). The collector waits until start-up is over, and what start-up made
    # is then left out of its sight (gc.freeze) until the command returns.
    collecting = gc.isenabled()
    gc.disable()
    try:
        from shipping_async.bulk.journal import JournalError  # the package, the client's too
        from shipping_async.cli._malloc import few_arenas
        from shipping_async.errors import ShippingError

        few_arenas()  # before the run starts threads
        words = list(sys.argv[1:] if argv is None else argv)
        args = build_parser(_command(words)).parse_args(words)
        # The words as given: a resume command repeats them (with the journal and --resume).
        args.argv = words
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
    try:
        return _handle(args, program=argv is None, documented=(ShippingError, JournalError))
    finally:
        gc.unfreeze()


def _handle(
    args: argparse.Namespace, *, program: bool, documented: tuple[type[Exception], ...]
) -> int:
    """Run the command ``args`` names; ``program``: on the process's own command line.
    A ``documented`` error is a setup error: one line, exit code 2."""
    from shipping_async.cli._terminal import printable

    try:
        code: int = args.handler(args)
        if program and args.command in _RUNS:
            _end_now(code)
    except documented as exc:
        print(f"error: {printable(exc)}", file=sys.stderr)
        return 2
    except BaseExceptionGroup as group:  # raised inside a task group of the run
        matched, rest = group.split(documented)
        if matched is None or rest is not None:
            raise
        for leaf in _leaves(matched):
            print(f"error: {printable(leaf)}", file=sys.stderr)
        return 2
    return code


def _end_now(code: int) -> None:
    """End the process of a finished run at once: the exit handlers run (logging's, an
    OpenTelemetry SDK's) and stdout and stderr are flushed, but the interpreter is not
    torn down. Freeing every module and object of a run one by one took 30-50 ms of CPU
    (0.02 ms per job of a 2,000-job batch) for nothing: the journal, the client and the
    files were closed by the run itself. Returns (the usual exit follows) under a
    profiler or a tracer (they write their results at the end), while another thread
    that the interpreter would wait for is alive, or when a stream cannot be flushed
    (the usual exit reports it)."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        return
    if any(
        not thread.daemon
        for thread in threading.enumerate()
        if thread is not threading.main_thread()
    ):
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    atexit._run_exitfuncs()  # the handlers the usual exit runs (cleared once run)
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    return [
        leaf
        for exc in group.exceptions
        for leaf in (_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    ]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
