"""``shipping-async sandbox``: run the sandbox until SIGINT or SIGTERM.

The first line on stdout is ``Sandbox listening on <base_url>``; when no token was given
the second is ``token: <token>``, and with ``--tokens N`` (N > 1) N lines
``token <account>: <token>`` follow instead. All are flushed at once so a parent process can
read them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import Any

from shipping_async.cli import _loop as event_loop

__all__ = ["TOKEN_ENV", "register"]

#: Environment variable read when ``--token`` is not given (keeps the token out of ``ps``).
TOKEN_ENV = "SHIPPING_ASYNC_SANDBOX_TOKEN"


def register(subparsers: Any) -> None:
    """Add the ``sandbox`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "sandbox",
        help="run the local sandbox of the shipping API",
        description="Run a stateful local simulator of the shipping API until interrupted.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port; 0 picks a free one")
    accounts = parser.add_mutually_exclusive_group()
    accounts.add_argument(
        "--token", help=f"bearer token to accept (default: ${TOKEN_ENV}, else generated)"
    )
    accounts.add_argument(
        "--tokens",
        type=int,
        metavar="N",
        help="serve N accounts (account-1 ... account-N), each with a generated token and its "
        "own order budget; the tokens are printed",
    )
    accounts.add_argument(
        "--tokens-file",
        metavar="PATH",
        help="serve the accounts of a file: one 'TOKEN' or 'ACCOUNT TOKEN' per line; tokens "
        "of one account share its order budget",
    )
    parser.add_argument(
        "--speed", type=float, default=1.0, help="sandbox time runs this many times faster"
    )
    parser.add_argument("--seed", type=int, help="make ids, tokens and waybills reproducible")
    parser.add_argument(
        "--rate-limit",
        type=int,
        default=20,
        metavar="N",
        help="POST /orders per 60 s window and account (20, as the API; more lifts the limit)",
    )
    parser.add_argument(
        "--rate-mode",
        choices=("sliding", "fixed"),
        default="sliding",
        help="POST /orders rate window: sliding (default) or fixed",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; returns the exit code."""
    from shipping_async.sandbox._accounts import MAX_TOKENS, read_tokens_file

    if args.speed <= 0 or args.rate_limit < 1:
        print("error: --speed must be > 0 and --rate-limit >= 1")
        return 2
    tokens: int | dict[str, list[str]] | None = None
    if args.tokens is not None:
        if not 1 <= args.tokens <= MAX_TOKENS:
            print(f"error: --tokens must be between 1 and {MAX_TOKENS}")
            return 2
        tokens = args.tokens
    elif args.tokens_file is not None:
        try:
            tokens = read_tokens_file(args.tokens_file)
        except (OSError, ValueError) as exc:
            # The text may quote the file's name: no control character reaches the terminal.
            text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(exc))
            print(f"error: --tokens-file: {text}")
            return 2
    try:
        event_loop.run(_serve(args, tokens))
    except KeyboardInterrupt:  # a second Ctrl-C during shutdown
        return 130
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")
        return 1
    return 0


async def _serve(args: argparse.Namespace, tokens: int | dict[str, list[str]] | None) -> None:
    from shipping_async.sandbox import SandboxServer

    token = None if tokens is not None else args.token or os.environ.get(TOKEN_ENV) or None
    server = SandboxServer(
        token=token,
        tokens=tokens,
        host=args.host,
        port=args.port,
        speed=args.speed,
        seed=args.seed,
        rate_mode=args.rate_mode,
        rate_limit=args.rate_limit,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        async with server:
            print(f"Sandbox listening on {server.base_url}", flush=True)
            if isinstance(tokens, int) and tokens > 1:
                for account, (generated,) in server.accounts.items():
                    print(f"token {account}: {generated}")
                sys.stdout.flush()
            elif (token is None and tokens is None) or tokens == 1:
                print(f"token: {server.token}", flush=True)
            await stop.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
