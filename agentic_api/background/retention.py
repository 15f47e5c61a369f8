"""Retention: stored responses (and, when asked, conversations) older than
``AGENTIC_RETENTION_DAYS`` are deleted by each process's background sweep, off the
request path, in short transactions of at most ``AGENTIC_RETENTION_BATCH_ROWS`` rows.

What goes and what stays (``storage/retention.py`` holds the queries; docs/retention.md
the operator's view):

- a finished response created before the cutoff, outside any stored conversation, that
  no stored response continues from: so a chain is pruned from its newest end back and a
  chain with a younger descendant keeps all its ancestors. A continuation of a pruned
  response answers what an unknown id answers (404 ``previous_response_not_found``);
- with ``AGENTIC_RETENTION_CONVERSATIONS``: a conversation unchanged since the cutoff,
  with no running or younger turn and none continued from outside it, with its items and
  responses (continuing it then answers 404, as for a deleted one);
- recorded Anthropic Messages turns (``message_turns``) created before the cutoff.

Several processes may sweep at once: every deletion re-checks its rule in its own
statement, so two sweeps delete each row once and never a row the rule keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from agentic_api.metrics import RETENTION_PRUNED
from agentic_api.runtime import Runtime
from agentic_api.storage.retention import RetentionRepository
from agentic_api.storage.types import utcnow

# One sweep's batches of each kind at most: a backlog (retention switched on over years of
# rows) drains over several sweeps rather than holding the database in one.
MAX_BATCHES_PER_SWEEP = 20


@dataclass
class Pruned:
    """What one sweep deleted, by kind."""

    responses: int = 0
    conversations: int = 0
    message_turns: int = 0

    def add(self, kind: str, count: int) -> None:
        setattr(self, kind, getattr(self, kind) + count)
        if count:
            RETENTION_PRUNED.labels(kind).inc(count)


async def prune_expired(services: Runtime, now: datetime | None = None) -> Pruned:
    """One sweep: deletes what retention lets go, batch by batch (nothing when
    ``AGENTIC_RETENTION_DAYS`` is unset)."""
    settings = services.settings
    pruned = Pruned()
    if settings.retention_days is None:
        return pruned
    cutoff = (now or utcnow()) - timedelta(days=settings.retention_days)
    batch = settings.retention_batch_rows
    db = services.db
    if settings.retention_conversations:
        for _ in range(MAX_BATCHES_PER_SWEEP):
            async with db.write() as session:
                repo = RetentionRepository(session)
                chosen = await repo.old_conversations(cutoff, batch)
                pruned.add("conversations", await repo.delete_conversations(chosen, cutoff))
            if len(chosen) < batch:
                break
    for _ in range(MAX_BATCHES_PER_SWEEP):
        async with db.write() as session:
            repo = RetentionRepository(session)
            chosen = await repo.old_responses(cutoff, batch)
            pruned.add("responses", await repo.delete_responses(chosen))
        if not chosen:
            break
    for _ in range(MAX_BATCHES_PER_SWEEP):
        async with db.write() as session:
            count = await RetentionRepository(session).delete_old_message_turns(cutoff, batch)
        pruned.add("message_turns", count)
        if count < batch:
            break
    return pruned
