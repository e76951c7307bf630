"""``shipping-async journal``: create or migrate a shared journal, settle unknown orders.

``journal init --journal postgresql://...`` creates the schema (or brings it to the
current version) and is safe to run any number of times, also by many workers at once.
``journal reconcile --journal ... KEY ORDER_ID`` records what an operator found out
about a job whose order outcome was unknown (``none``: no order was created, so it will
be ordered again).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from shipping_async.cli._terminal import printable

__all__ = ["register", "run_init", "run_reconcile"]


def register(subparsers: Any) -> None:
    """Add the ``journal`` subcommand and its ``init`` and ``reconcile`` actions."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "journal",
        help="create or migrate a shared journal; settle unknown orders",
        description="Manage a journal: its schema, and jobs whose order outcome is unknown.",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    init = actions.add_parser(
        "init", help="create or migrate the schema (idempotent)", description=run_init.__doc__
    )
    init.add_argument("--journal", required=True, help="postgresql://host/db[?schema=NAME]")
    init.set_defaults(handler=run_init)
    settle = actions.add_parser(
        "reconcile", help="settle a job whose order outcome is unknown", description=__doc__
    )
    settle.add_argument("--journal", required=True, help="postgresql://... or a journal file")
    settle.add_argument("key", help="the job's key")
    settle.add_argument("order_id", help="the order found for it, or 'none' if none exists")
    settle.set_defaults(handler=run_reconcile)


def run_init(args: argparse.Namespace) -> int:
    """Create the journal's tables, or migrate them to this version; safe to repeat."""
    return asyncio.run(_init(args.journal))


def run_reconcile(args: argparse.Namespace) -> int:
    """Settle one unknown job: continue from its order, or order it again."""
    text = args.order_id.strip().lower()
    if text != "none" and not text.isdigit():
        print(f"error: ORDER_ID must be a number or 'none', got {args.order_id!r}", file=sys.stderr)
        return 2
    return asyncio.run(_reconcile(args.journal, args.key, None if text == "none" else int(text)))


async def _init(spec: str) -> int:
    from shipping_async.scaleout._pg_schema import LATEST_VERSION, migrate
    from shipping_async.scaleout.factory import is_shared_journal, split_options

    if not is_shared_journal(spec):
        print("error: --journal must be a postgresql:// URL", file=sys.stderr)
        return 2
    import asyncpg

    from shipping_async.scaleout.postgres_journal import DEFAULT_SCHEMA

    dsn, options = split_options(spec, "schema", "sent_marks")
    schema = options.get("schema", DEFAULT_SCHEMA)
    try:
        connection = await asyncpg.connect(dsn)
    except (OSError, asyncpg.PostgresError) as exc:
        print(f"error: cannot connect to PostgreSQL: {exc}", file=sys.stderr)
        return 2
    try:
        applied = await migrate(connection, schema)
    finally:
        await connection.close()
    done = f"applied {', '.join(map(str, applied))}" if applied else "nothing to do"
    print(f"journal schema {schema!r} at version {LATEST_VERSION} ({done})")
    return 0


async def _reconcile(spec: str, key: str, order_id: int | None) -> int:
    from shipping_async.bulk.journal import JournalError
    from shipping_async.scaleout.factory import open_journal

    try:
        journal = await open_journal(spec)
    except (JournalError, OSError, ValueError) as exc:
        print(f"error: cannot open the journal: {exc}", file=sys.stderr)
        return 2
    try:
        record = await journal.reconcile(key, order_id=order_id)
    except JournalError as exc:
        print(f"error: {printable(exc)}", file=sys.stderr)
        return 2
    finally:
        await journal.close()
    print(f"{printable(record.key)}: {record.state.value}")
    return 0
