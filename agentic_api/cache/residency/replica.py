"""One replica's residency: which sessions hold which of its KV blocks, as its events said,
and every block it holds as a tree (``tree.py``: how much of a sequence's prefix it holds).

vLLM labels a ``BlockStored`` with the session of the request that stored it; a
``BlockRemoved`` names hashes only, so removals are mapped back to sessions through the
stores seen before (``owners``). A block reused by another session (reported with
``kv_cache_report_mode: full``) has several owners; its removal counts for each.

Everything here errs toward showing less than the engine holds, never more: a removal of
a hash we never saw changes nothing, a session or block dropped for memory is simply
forgotten, and anything that may have hidden a removal clears the replica (``clear``).
Plain data and arithmetic, no locks and no metrics: ``tracker.py`` owns those.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

from agentic_api.cache.residency.events import BlockHash, BlocksRemoved, BlocksStored
from agentic_api.cache.residency.tree import BlockTree

# Store times kept per session, to tell which replica served which turn.
STORE_TIMES_KEPT = 32
# Removals of one session closer together than this are one eviction (vLLM frees blocks
# step by step as new requests need them).
EVICTION_MERGE_SECONDS = 2.0


@dataclass(slots=True)
class Eviction:
    at: float
    blocks: int
    tokens: int
    # Seconds since the session's last turn ended; None when one of its turns was running.
    idle_seconds: float | None
    # Set once a later turn of the session has started (counted as "evicted before resume").
    resumed: bool = False


@dataclass(slots=True)
class Reset:
    at: float
    reason: str  # "cleared" | "restart" | "gap" | "malformed" | "disconnected"
    blocks: int


@dataclass(slots=True)
class SessionBlocks:
    first_stored: float
    last_stored: float
    blocks: dict[BlockHash, int] = field(default_factory=dict)  # hash -> tokens
    tokens: int = 0
    salts: set[str] = field(default_factory=set)
    store_times: deque[float] = field(default_factory=lambda: deque(maxlen=STORE_TIMES_KEPT))
    evictions: deque[Eviction] = field(default_factory=deque)


@dataclass(slots=True)
class Dropped:
    """What a store made us forget to stay within the memory bounds."""

    sessions: int = 0
    blocks: int = 0
    # Blocks of the replica's tree (any session's) past its bound.
    tree_blocks: int = 0


class ReplicaResidency:
    def __init__(
        self,
        name: str,
        *,
        max_sessions: int,
        max_blocks_per_session: int,
        evictions_kept: int,
        max_blocks: int,
    ) -> None:
        self.name = name
        # Every block the replica reported, whoever stored it: a sequence's leading blocks.
        self.tree = BlockTree(max_blocks)
        self.max_sessions = max_sessions
        self.max_blocks_per_session = max_blocks_per_session
        self.evictions_kept = evictions_kept
        # Least recently stored first.
        self.sessions: OrderedDict[str, SessionBlocks] = OrderedDict()
        # hash -> the session holding it, or the set of sessions when several do.
        self.owners: dict[BlockHash, str | set[str]] = {}
        # Distinct blocks' tokens (a block several sessions hold counts once).
        self.resident_tokens = 0
        self.block_size: int | None = None
        self.coverage_since: float | None = None
        # The replica's cache was empty when its reports began here (its first batch was
        # the engine's first, or the last reset was a clear): every block it holds was
        # reported, so a block never reported is not held. Set by the tracker.
        self.complete = False
        self.resets: deque[Reset] = deque(maxlen=16)
        self.unattributed_blocks = 0

    # -- events ------------------------------------------------------------------------

    def store(self, event: BlocksStored, now: float) -> Dropped:
        dropped = Dropped()
        self.block_size = event.block_size
        if self.coverage_since is None:
            self.coverage_since = now
        dropped.tree_blocks = self.tree.store(event)
        if dropped.tree_blocks:
            # Forgotten blocks read as never reported: no longer a complete account.
            self.complete = False
        session_id = event.session_id
        if session_id is None:
            # Nobody to attribute them to (a request that reached vLLM without a session).
            self.unattributed_blocks += len(event.hashes)
            return dropped
        record = self.sessions.get(session_id)
        if record is None:
            record = SessionBlocks(first_stored=now, last_stored=now)
            self.sessions[session_id] = record
        else:
            self.sessions.move_to_end(session_id)
        record.last_stored = now
        if not record.store_times or record.store_times[-1] != now:
            record.store_times.append(now)
        if event.salt is not None:
            record.salts.add(event.salt)
        tokens = event.block_size
        blocks = record.blocks
        for block_hash in event.hashes:
            if block_hash in blocks:
                continue  # a duplicate report: already counted
            blocks[block_hash] = tokens
            record.tokens += tokens
            if self._own(block_hash, session_id):
                self.resident_tokens += tokens
        while len(blocks) > self.max_blocks_per_session:
            # Forget the oldest: under-coverage, never a block that is not there.
            oldest = next(iter(blocks))
            self._forget_block(session_id, record, oldest)
            dropped.blocks += 1
        while len(self.sessions) > self.max_sessions:
            victim_id, victim = self.sessions.popitem(last=False)
            for block_hash, tokens in victim.blocks.items():
                if self._disown(block_hash, victim_id):
                    self.resident_tokens -= tokens
            dropped.sessions += 1
        return dropped

    def remove(
        self, event: BlocksRemoved, now: float, idle_seconds: dict[str, float | None]
    ) -> tuple[list[tuple[str, Eviction]], int]:
        """Applies a removal; returns the evictions it started (session, record) and how
        many hashes it named that no session held. ``idle_seconds``: per session, how long
        since its last turn ended (None while one runs); sessions not in it count from
        their last store."""
        started: list[tuple[str, Eviction]] = []
        unknown = 0
        touched: dict[str, list[int]] = {}
        self.tree.remove(event.hashes)
        for block_hash in event.hashes:
            holders = self.owners.pop(block_hash, None)
            if holders is None:
                unknown += 1
                continue
            block_tokens = 0
            for session_id in (holders,) if isinstance(holders, str) else tuple(holders):
                record = self.sessions.get(session_id)
                if record is None:
                    continue
                tokens = record.blocks.pop(block_hash, 0)
                block_tokens = tokens or block_tokens
                record.tokens -= tokens
                counts = touched.setdefault(session_id, [0, 0])
                counts[0] += 1
                counts[1] += tokens
            self.resident_tokens -= block_tokens
        for session_id, (blocks, tokens) in touched.items():
            record = self.sessions[session_id]
            last = record.evictions[-1] if record.evictions else None
            if last is not None and now - last.at <= EVICTION_MERGE_SECONDS and not last.resumed:
                last.blocks += blocks
                last.tokens += tokens
                last.at = now
                continue
            idle = idle_seconds.get(session_id, now - record.last_stored)
            eviction = Eviction(at=now, blocks=blocks, tokens=tokens, idle_seconds=idle)
            record.evictions.append(eviction)
            while len(record.evictions) > self.evictions_kept:
                record.evictions.popleft()
            started.append((session_id, eviction))
        return started, unknown

    def clear(self, now: float, reason: str) -> int:
        """Forgets every block (the sessions' records stay, with their evictions);
        returns how many blocks were forgotten."""
        forgotten = len(self.owners)
        self.tree.clear()
        for record in self.sessions.values():
            record.blocks.clear()
            record.tokens = 0
        self.owners.clear()
        self.resident_tokens = 0
        self.coverage_since = now
        self.complete = False
        self.resets.append(Reset(at=now, reason=reason, blocks=forgotten))
        return forgotten

    # -- the reverse index --------------------------------------------------------------

    def _own(self, block_hash: BlockHash, session_id: str) -> bool:
        """Adds a holder; True when the block was not held by anyone before."""
        holders = self.owners.get(block_hash)
        if holders is None:
            self.owners[block_hash] = session_id
            return True
        if isinstance(holders, str):
            if holders != session_id:
                self.owners[block_hash] = {holders, session_id}
        else:
            holders.add(session_id)
        return False

    def _disown(self, block_hash: BlockHash, session_id: str) -> bool:
        """Removes a holder; True when nobody holds the block any more."""
        holders = self.owners.get(block_hash)
        if holders is None:
            return False
        if isinstance(holders, str):
            if holders != session_id:
                return False
            del self.owners[block_hash]
            return True
        holders.discard(session_id)
        if len(holders) == 1:
            self.owners[block_hash] = next(iter(holders))
        return False

    def _forget_block(self, session_id: str, record: SessionBlocks, block_hash: BlockHash) -> None:
        tokens = record.blocks.pop(block_hash)
        record.tokens -= tokens
        if self._disown(block_hash, session_id):
            self.resident_tokens -= tokens
