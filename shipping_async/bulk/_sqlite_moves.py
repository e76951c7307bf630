"""The SQLite journal's writes from the records it holds: one fenced UPDATE, nothing read back.

The journal file is held by one process (``locking_mode=EXCLUSIVE``) and every write of
that process goes through its one :class:`~shipping_async.bulk.sqlite_journal.SQLiteJournal`,
so the journal knows what a row it claimed holds without reading it: it keeps each
claimed job's record and replaces it with every write. A write is then one ``UPDATE``
of the columns that change, fenced in its ``WHERE`` by the claim token (and by the state
it requires, and for the order intent by a live lease): when the row does not match,
nothing is written and the caller reads the row to say why (a lost lease, a wrong
state), as a journal without kept records does for every write. The new record is built
from the kept one, not decoded from the row.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec

from shipping_async.bulk._journal_store import JOB_ENCODER, new_token
from shipping_async.bulk.journal import JobRecord, JobState

__all__ = ["claim_kept", "move"]

_CLAIM = (
    "UPDATE jobs SET lease_owner = ?, lease_until = ?, claim_token = ?, updated_at = ?, "
    "attempts = attempts + 1 WHERE key = ?"
)


@functools.cache
def _move_sql(
    facts: bool, order_id: bool, retryable: bool, drop_lease: bool, intent: bool, require: bool
) -> str:
    sets = "state = ?, updated_at = ?"
    if facts:  # only the facts that change: a null drops one (JSON merge patch)
        sets += ", facts = json_patch(facts, ?)"
    if order_id:
        sets += ", order_id = ?"
    if retryable:
        sets += ", retryable = ?"
    if drop_lease:
        sets += ", lease_owner = NULL, lease_until = NULL, claim_token = NULL"
    if intent:
        sets += ", order_intent_at = ?"
    where = "key = ? AND claim_token = ?"
    if require:
        where += " AND state = ?"
    if intent:  # the intent needs the lease live, not only the token
        where += " AND lease_until > ?"
    return f"UPDATE jobs SET {sets} WHERE {where}"


def move(
    db: sqlite3.Connection,
    current: JobRecord,
    state: JobState,
    fields: Mapping[str, Any],
    now: datetime,
    *,
    keep_lease: bool,
    require: Collection[JobState] | None,
    intent: tuple[datetime, str] | None = None,
) -> JobRecord | None:
    """``current`` (the row as stored, under its claim token) moved to ``state`` with
    ``fields``; ``intent`` for the order intent: its real wall-clock time and that time
    as stored (:func:`~shipping_async.bulk._sqlite_rows.wall_stamp`).

    ``None`` when the row is not under that token (or not in one of the states of
    ``require``, or, for the intent, its lease lapsed): nothing was written.
    """
    if require is not None and current.state not in require:
        return None  # the row, read, says why
    changed = {name: value for name, value in fields.items() if getattr(current, name) != value}
    new_order = "order_id" in changed
    facts = {name: value for name, value in changed.items() if name != "order_id"}
    sql = _move_sql(
        bool(facts),
        new_order,
        "retryable" in facts,
        not keep_lease,
        intent is not None,
        bool(require),
    )
    params: list[Any] = [state.value, now.isoformat()]
    if facts:
        params.append(JOB_ENCODER.encode(facts))
    if new_order:
        params.append(changed["order_id"])
    if "retryable" in facts:
        params.append(int(facts["retryable"]))
    if intent is not None:
        params.append(intent[1])
    params += [current.key, current.claim_token]
    if require is not None:  # the state kept for it, one of require's: fenced by the row's
        params.append(current.state.value)
    if intent is not None:
        params.append(now.timestamp())
    if db.execute(sql, params).rowcount != 1:
        return None
    if "waybills" in changed:  # the record's own list, as if decoded
        changed["waybills"] = list(changed["waybills"])
    if not keep_lease:
        changed.update(lease_owner=None, lease_until=None, claim_token=None)
    if intent is not None:
        changed["order_intent_at"] = intent[0]
    return msgspec.structs.replace(current, state=state, updated_at=now, **changed)


def claim_kept(
    db: sqlite3.Connection,
    records: list[JobRecord],
    worker_id: str,
    now: datetime,
    lease: float,
) -> list[JobRecord]:
    """``records`` (rows just read, none ``FAILED``: their state stays) leased to
    ``worker_id``, each with a new claim token; one statement for them all."""
    until = now.timestamp() + lease
    lease_until = datetime.fromtimestamp(until, UTC)
    stamp = now.isoformat()
    claimed = [
        msgspec.structs.replace(
            record,
            lease_owner=worker_id,
            lease_until=lease_until,
            claim_token=new_token(),
            attempts=record.attempts + 1,
            updated_at=now,
        )
        for record in records
    ]
    db.executemany(
        _CLAIM, [(worker_id, until, record.claim_token, stamp, record.key) for record in claimed]
    )
    return claimed
