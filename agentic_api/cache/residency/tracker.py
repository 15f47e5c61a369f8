"""Residency across replicas, fed by the subscriber thread and read by the event loop.

One ``ResidencyTracker`` per process. The subscriber thread calls ``apply`` with each
batch; turns call ``turn_started`` / ``turn_finished``; the admin views take snapshots.
All of them hold one lock for microseconds (no I/O under it), so the event loop never
waits on the subscriber for long.

Each replica's batches carry a sequence number that restarts at 0 with the publisher's
process. A number lower than or equal to the last one means the replica restarted (its
cache is empty now); a jump means batches were lost (ZMQ drops past its high-water
mark), and a lost batch may have removed blocks. Either way that replica's residency is
dropped whole: we would rather show nothing than blocks that are gone.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from agentic_api import metrics
from agentic_api.cache.residency.events import AllCleared, Batch, BlocksRemoved, BlocksStored
from agentic_api.cache.residency.replica import Eviction, ReplicaResidency, Reset
from agentic_api.cache.residency.tree import content_keys


@dataclass(slots=True)
class _Activity:
    last_finished: float | None = None
    running: int = 0


@dataclass(frozen=True, slots=True)
class SessionOnReplica:
    """A copy of what one replica reported for one session, safe to read without the lock."""

    replica: str
    connected: bool
    coverage_since: float | None
    block_size: int | None
    resident_blocks: int
    resident_tokens: int
    first_stored: float | None
    last_stored: float | None
    salts: tuple[str, ...]
    store_times: tuple[float, ...]
    evictions: tuple[Eviction, ...]
    resets: tuple[Reset, ...]


@dataclass(frozen=True, slots=True)
class PrefixOnReplica:
    """How much of one token sequence's prefix a replica holds, as its events said."""

    replica: str
    connected: bool
    coverage_since: float | None
    block_size: int | None
    # Leading tokens in full blocks the replica holds, as far as its reports tell.
    resident_tokens: int
    # Whether that is where the held prefix ends: False when the walk stopped at a block
    # never reported here while the replica may hold blocks stored before its reports
    # began (this process started or lost events after it did): ``resident_tokens`` is
    # then only what is known to be held, and the rest is unknown, not absent.
    known: bool = True


@dataclass(frozen=True, slots=True)
class _Served:
    """A turn's evidence of blocks held before this process listened: per block size, the
    content keys of the blocks vLLM served it from the cache and, last, of the first
    block it stored itself."""

    session_id: str | None
    salt: str | None
    keys: dict[int, list[int]]
    at: float


# Turns' evidence waiting for their blocks' reports, and for how long.
SERVED_PENDING = 64
SERVED_WAIT_SECONDS = 60.0


@dataclass(slots=True)
class _Feed:
    """A replica's stream: its last sequence number and whether it is connected."""

    last_seq: int | None = None
    connected: bool = False


class ResidencyTracker:
    def __init__(
        self,
        replicas: Iterable[str],
        *,
        max_sessions: int = 10_000,
        max_blocks_per_session: int = 4096,
        evictions_kept: int = 16,
        max_blocks: int = 1 << 20,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self.max_sessions = max_sessions
        self._replicas: dict[str, ReplicaResidency] = {}
        self._feeds: dict[str, _Feed] = {}
        for name in replicas:
            self._replicas[name] = ReplicaResidency(
                name,
                max_sessions=max_sessions,
                max_blocks_per_session=max_blocks_per_session,
                evictions_kept=evictions_kept,
                max_blocks=max_blocks,
            )
            self._feeds[name] = _Feed()
        self._activity: OrderedDict[str, _Activity] = OrderedDict()
        self._served: deque[_Served] = deque(maxlen=SERVED_PENDING)

    @property
    def replica_names(self) -> list[str]:
        return list(self._replicas)

    def last_sequence(self, replica: str) -> int | None:
        """The last batch number applied from the replica (None: none since a reset)."""
        with self._lock:
            return self._feeds[replica].last_seq

    def now(self) -> float:
        return self._clock()

    # -- the subscriber's side ----------------------------------------------------------

    def apply(self, replica: str, batch: Batch, now: float | None = None) -> None:
        now = self.now() if now is None else now
        with self._lock:
            target = self._replicas[replica]
            feed = self._feeds[replica]
            last = feed.last_seq
            if last is not None and batch.seq != last + 1:
                self._reset(target, now, "restart" if batch.seq <= last else "gap")
            if last is None or batch.seq != last + 1:
                # Reports begin (again) here: complete only from the engine's first batch
                # (a new engine's cache is empty; a later batch means some were missed).
                target.complete = batch.seq == 0
            feed.last_seq = batch.seq
            feed.connected = True
            self._apply_events(target, batch, now)
            if self._served and any(isinstance(e, BlocksStored) for e in batch.events):
                self._graft_served(now)
        metrics.KV_EVENT_BATCHES.labels(replica).inc()
        metrics.KV_EVENT_LAG.labels(replica).observe(max(0.0, now - batch.ts))
        metrics.KV_RESIDENT_TOKENS.labels(replica).set(target.resident_tokens)
        metrics.KV_TRACKED_SESSIONS.labels(replica).set(len(target.sessions))

    def lost(self, replica: str, reason: str, now: float | None = None) -> None:
        """What the replica said may be incomplete (``malformed``) or its publisher went
        away (``disconnected``): drop its residency, and accept any sequence next."""
        now = self.now() if now is None else now
        with self._lock:
            target = self._replicas[replica]
            feed = self._feeds[replica]
            feed.last_seq = None
            if reason == "disconnected":
                feed.connected = False
            self._reset(target, now, reason)
        metrics.KV_RESIDENT_TOKENS.labels(replica).set(0)
        if reason == "disconnected":
            metrics.KV_SUBSCRIBER_CONNECTED.labels(replica).set(0)

    def connected(self, replica: str) -> None:
        with self._lock:
            self._feeds[replica].connected = True
        metrics.KV_SUBSCRIBER_CONNECTED.labels(replica).set(1)

    def _reset(self, target: ReplicaResidency, now: float, reason: str) -> None:
        target.clear(now, reason)
        metrics.KV_COVERAGE_RESETS.labels(target.name, reason).inc()

    def _apply_events(self, target: ReplicaResidency, batch: Batch, now: float) -> None:
        stored = removed = 0
        for event in batch.events:
            if isinstance(event, BlocksStored):
                stored += 1
                dropped = target.store(event, now)
                if dropped.sessions:
                    metrics.KV_RESIDENCY_DROPPED.labels(target.name, "session").inc(
                        dropped.sessions
                    )
                if dropped.blocks:
                    metrics.KV_RESIDENCY_DROPPED.labels(target.name, "block").inc(dropped.blocks)
                if dropped.tree_blocks:
                    metrics.KV_RESIDENCY_DROPPED.labels(target.name, "tree_block").inc(
                        dropped.tree_blocks
                    )
            elif isinstance(event, BlocksRemoved):
                removed += 1
                started, unknown = target.remove(event, now, self._idle(event, target, now))
                if unknown:
                    metrics.KV_UNKNOWN_REMOVALS.labels(target.name).inc(unknown)
                for _session, eviction in started:
                    if eviction.idle_seconds is not None:
                        metrics.KV_SESSIONS_EVICTED_IDLE.labels(target.name).inc()
            elif isinstance(event, AllCleared):
                self._reset(target, now, "cleared")
                target.complete = True  # nothing is held after a clear
                metrics.KV_EVENTS.labels(target.name, "cleared").inc()
        if stored:
            metrics.KV_EVENTS.labels(target.name, "stored").inc(stored)
        if removed:
            metrics.KV_EVENTS.labels(target.name, "removed").inc(removed)

    def _idle(
        self, event: BlocksRemoved, target: ReplicaResidency, now: float
    ) -> dict[str, float | None]:
        # Only the sessions this removal touches, looked up lazily by the replica map.
        idle: dict[str, float | None] = {}
        owners = target.owners
        for block_hash in event.hashes:
            holders = owners.get(block_hash)
            if holders is None:
                continue
            for session_id in (holders,) if isinstance(holders, str) else holders:
                if session_id in idle:
                    continue
                activity = self._activity.get(session_id)
                if activity is None:
                    continue  # no turn seen here: the replica map counts from its last store
                if activity.running:
                    idle[session_id] = None
                elif activity.last_finished is not None:
                    idle[session_id] = max(0.0, now - activity.last_finished)
        return idle

    # -- the turns' side ----------------------------------------------------------------

    def turn_started(self, session_id: str, now: float | None = None) -> None:
        """A turn of ``session_id`` is about to go upstream: if a replica removed its
        blocks since its previous turn ended, count that resume as evicted."""
        now = self.now() if now is None else now
        resumed: list[tuple[str, float | None]] = []
        with self._lock:
            activity = self._activity.get(session_id)
            if activity is None:
                activity = _Activity()
                self._activity[session_id] = activity
                while len(self._activity) > self.max_sessions:
                    self._activity.popitem(last=False)
            else:
                self._activity.move_to_end(session_id)
            if not activity.running:
                for replica in self._replicas.values():
                    record = replica.sessions.get(session_id)
                    if record is None:
                        continue
                    # The previous turn ended here, or (run by another process) about when
                    # the replica last stored blocks for it.
                    since = (
                        activity.last_finished
                        if activity.last_finished is not None
                        else record.last_stored
                    )
                    hit = False
                    for eviction in record.evictions:
                        if not eviction.resumed and eviction.at >= since:
                            eviction.resumed = True
                            hit = hit or eviction.idle_seconds is not None
                    if hit:
                        resumed.append((replica.name, now - since))
            activity.running += 1
        for replica_name, idle in resumed:
            metrics.KV_EVICTED_BEFORE_RESUME.labels(replica_name).inc()
            if idle is not None:
                metrics.KV_IDLE_BEFORE_EVICTED_RESUME.labels(replica_name).observe(idle)

    def turn_finished(self, session_id: str, now: float | None = None) -> None:
        now = self.now() if now is None else now
        with self._lock:
            activity = self._activity.get(session_id)
            if activity is None:
                return
            activity.running = max(0, activity.running - 1)
            activity.last_finished = now

    def served(
        self,
        session_id: str | None,
        salt: str | None,
        tokens: Sequence[int],
        cached: int | None,
        block_size: int | None = None,
    ) -> None:
        """A turn's upstream answer: its prompt + output ids, of which vLLM served the
        first ``cached`` from its cache. Those blocks were held then: where a replica
        never reported them (stored before this process listened), they are grafted into
        its tree once the turn's own stored blocks are reported under them (now, or
        within ``SERVED_WAIT_SECONDS``). ``block_size``: the upstream's, for replicas
        that have not reported one yet."""
        if not cached or len(tokens) <= cached:
            return
        with self._lock:
            sizes = {replica.block_size for replica in self._replicas.values()}
        sizes.add(block_size)
        # Hashed outside the lock, only as far as a graft reads: the served blocks and the
        # first one the turn stored (kept only when it filled one).
        keys = {
            size: found
            for size in sizes
            if size and cached >= size
            for found in (content_keys(tokens[: (cached // size + 1) * size], size),)
            if len(found) == cached // size + 1
        }
        if not keys:
            return
        now = self.now()
        with self._lock:
            self._served.append(_Served(session_id, salt, keys, now))
            self._graft_served(now)

    def _graft_served(self, now: float) -> None:
        """Tries each waiting turn's evidence on every replica (under the lock)."""
        waiting: list[_Served] = []
        for evidence in self._served:
            if now - evidence.at > SERVED_WAIT_SECONDS:
                continue
            if not any(self._graft(replica, evidence) for replica in self._replicas.values()):
                waiting.append(evidence)
        self._served.clear()
        self._served.extend(waiting)

    def _graft(self, replica: ReplicaResidency, evidence: _Served) -> bool:
        keys = evidence.keys.get(replica.block_size or 0)
        if keys is None:
            return False
        gained = replica.tree.graft(keys[:-1], evidence.salt, evidence.session_id, keys[-1])
        if gained:
            metrics.KV_GRAFTED_BLOCKS.labels(replica.name).inc(gained)
        return gained > 0

    # -- the views' side ----------------------------------------------------------------

    def block_size(self) -> int | None:
        """The KV block size the replicas' events carry, when every replica that sent
        one agrees (None before any store event, or when they differ)."""
        with self._lock:
            sizes = {replica.block_size for replica in self._replicas.values()}
        sizes.discard(None)
        return sizes.pop() if len(sizes) == 1 else None

    def prefix(self, tokens: Sequence[int], salt: str | None) -> list[PrefixOnReplica]:
        """Per configured replica, how many leading tokens of ``tokens`` (a response's
        prompt + output, under the tenant's ``salt``) it holds, whoever stored them."""
        with self._lock:
            sizes = {name: replica.block_size for name, replica in self._replicas.items()}
        # Hashing the sequence's blocks needs no lock; one key list per block size.
        keys = {size: content_keys(tokens, size) for size in set(sizes.values()) if size}
        found: list[PrefixOnReplica] = []
        with self._lock:
            for name, replica in self._replicas.items():
                size = replica.block_size
                blocks, known = 0, False
                if size and size == sizes[name]:
                    blocks, known = replica.tree.leading_blocks(keys[size], salt)
                    # Every block a continuation can reuse (all but the last token's) is
                    # held, or the replica's reports cover everything it holds.
                    known = (
                        known
                        or replica.complete
                        or blocks * size >= (len(tokens) - 1) // size * size
                    )
                found.append(
                    PrefixOnReplica(
                        replica=name,
                        connected=self._feeds[name].connected,
                        coverage_since=replica.coverage_since,
                        block_size=size,
                        resident_tokens=blocks * (size or 0),
                        known=known,
                    )
                )
        return found

    def session(self, session_id: str) -> list[SessionOnReplica]:
        """What each configured replica reported for the session (zeros where nothing)."""
        views: list[SessionOnReplica] = []
        with self._lock:
            for name, replica in self._replicas.items():
                record = replica.sessions.get(session_id)
                feed = self._feeds[name]
                resets = tuple(replace(reset) for reset in replica.resets)
                if record is None:
                    views.append(
                        SessionOnReplica(
                            replica=name,
                            connected=feed.connected,
                            coverage_since=replica.coverage_since,
                            block_size=replica.block_size,
                            resident_blocks=0,
                            resident_tokens=0,
                            first_stored=None,
                            last_stored=None,
                            salts=(),
                            store_times=(),
                            evictions=(),
                            resets=resets,
                        )
                    )
                    continue
                views.append(
                    SessionOnReplica(
                        replica=name,
                        connected=feed.connected,
                        coverage_since=replica.coverage_since,
                        block_size=replica.block_size,
                        resident_blocks=len(record.blocks),
                        resident_tokens=record.tokens,
                        first_stored=record.first_stored,
                        last_stored=record.last_stored,
                        salts=tuple(sorted(record.salts)),
                        store_times=tuple(record.store_times),
                        evictions=tuple(replace(e) for e in record.evictions),
                        resets=resets,
                    )
                )
        return views
