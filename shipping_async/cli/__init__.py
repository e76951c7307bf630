"""The ``shipping-async`` command line: one subcommand per module of this package."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["main"]

# Each module exposes ``register(subparsers)``, which adds its parser and sets
# ``handler`` (a callable taking the parsed namespace and returning an exit code).
_COMMAND_MODULES = ("bulk", "journal", "sandbox", "status", "webhooks", "worker")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shipping-async", description="Shipping API SDK tools: sandbox, bulk shipping."
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMAND_MODULES:
        importlib.import_module(f"{__name__}.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = build_parser().parse_args(argv)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
