"""The PostgreSQL journal's schema and its migrations, applied once, in order, under a lock.

Each migration is a list of statements with a version number; ``schema_version`` holds
the versions applied. :func:`migrate` takes a transaction-scoped advisory lock on the
schema's name first, so workers that start together do not race, and applies only what
is missing: running it again changes nothing. Never edit a released migration; add one.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LATEST_VERSION", "MIGRATIONS", "migrate", "quote_ident"]

# {s} is the quoted schema name.
MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (
        1,
        (
            """
            CREATE TABLE {s}.jobs (
                seq bigserial PRIMARY KEY,
                key text NOT NULL UNIQUE,
                account text NOT NULL DEFAULT '',
                state text NOT NULL CHECK (state IN ('pending', 'quoted', 'ordering',
                    'ordered', 'waybilled', 'done', 'failed', 'unknown')),
                job jsonb NOT NULL,
                quote_id bigint,
                estimate_id bigint,
                carrier text,
                service text,
                cost numeric,
                currency text,
                hub boolean NOT NULL DEFAULT false,
                order_id bigint,
                waybills text[] NOT NULL DEFAULT '{{}}',
                pickup_confirmation text,
                pickup_date date,
                pickup_from time,
                pickup_to time,
                error text,
                error_stage text,
                retryable boolean NOT NULL DEFAULT false,
                attempts integer NOT NULL DEFAULT 0,
                lease_owner text,
                lease_until timestamptz,
                order_intent_at timestamptz,
                created_at timestamptz NOT NULL DEFAULT now(),
                updated_at timestamptz NOT NULL DEFAULT now()
            )
            """,
            # What claim() scans: unfinished jobs in the order they were added.
            """
            CREATE INDEX jobs_unfinished ON {s}.jobs (account, seq)
                WHERE state NOT IN ('done', 'unknown')
            """,
            "CREATE INDEX jobs_by_state ON {s}.jobs (state, account)",
            "CREATE INDEX jobs_by_owner ON {s}.jobs (lease_owner) WHERE lease_owner IS NOT NULL",
        ),
    ),
    (
        2,
        # Claim-token fencing: every claim gets a new token, every write must name it.
        ("ALTER TABLE {s}.jobs ADD COLUMN claim_token text",),
    ),
    (
        3,
        # Self-settling unknown orders (issue 10): order_received events as evidence, and
        # how a job was settled from them.
        (
            "ALTER TABLE {s}.jobs ADD COLUMN evidence text",
            "CREATE INDEX jobs_by_order ON {s}.jobs (order_id) WHERE order_id IS NOT NULL",
            """
            CREATE TABLE {s}.order_events (
                order_id bigint PRIMARY KEY,
                received_at timestamptz NOT NULL DEFAULT now(),
                deliveries integer NOT NULL DEFAULT 1
            )
            """,
            "CREATE INDEX order_events_by_time ON {s}.order_events (received_at)",
        ),
    ),
)

LATEST_VERSION = MIGRATIONS[-1][0]


def quote_ident(name: str) -> str:
    """``name`` as a PostgreSQL identifier, quoted (``my"schema`` -> ``"my""schema"``)."""
    if not name or "\x00" in name:
        raise ValueError(f"schema: not a usable identifier: {name!r}")
    return '"' + name.replace('"', '""') + '"'


async def migrate(connection: Any, schema: str) -> list[int]:
    """Bring ``schema`` up to :data:`LATEST_VERSION`; return the versions applied now.

    ``connection`` is an ``asyncpg.Connection``.
    """
    s = quote_ident(schema)
    applied_now: list[int] = []
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"journal:{schema}")
        await connection.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        await connection.execute(
            f"CREATE TABLE IF NOT EXISTS {s}.schema_version ("
            "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {row[0] for row in await connection.fetch(f"SELECT version FROM {s}.schema_version")}
        for version, statements in MIGRATIONS:
            if version in done:
                continue
            for statement in statements:
                await connection.execute(statement.format(s=s))
            await connection.execute(
                f"INSERT INTO {s}.schema_version (version) VALUES ($1)", version
            )
            applied_now.append(version)
    return applied_now
