"""What placement remembers between rounds, in one process (``cache/placement.py`` is
the rule, this is its memory): which replicas are ejected and until when, each replica's
last load reading, which replica served each recent round (the previous round's replica
is the placement's best guess while its KV events are still on their way), each live
session's *claim* (the replica it was last placed on and the tokens it will come back
with: what the rule weighs a replica's room by), and every decision made, per session,
for the admin timeline and the console.

No I/O and no lock: everything here runs on the event loop (the probe loop in
``serving/replica_probe.py`` writes loads and ejections, the rounds read them).
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from agentic_api import metrics
from agentic_api.cache.placement import Decision, Load
from agentic_api.cache.residency.tracker import ResidencyTracker

# Consecutive failures double the back-off up to this many times the base.
MAX_BACKOFF_FACTOR = 8
# What a placed round was: a turn's round, a compacting turn's summary, a prewarm (a
# client's or keep-warm's), /v1/responses/compact, /v1/responses/input_tokens, an
# Anthropic Messages call.
Purpose = Literal["turn", "compaction", "prewarm", "compact", "input_tokens", "messages"]
# Decisions kept per session (the timeline shows those of the turns it lists).
DECISIONS_KEPT = 64


@dataclass(frozen=True, slots=True)
class Claim:
    """A session's hold on a replica: where it was last placed, the tokens it comes back
    with (None: not known yet, its first round not answered), how many of those the
    replica already held when the session's first round there began (a prefix other
    sessions share, which the session that brought it counts), and when it was placed."""

    replica: str
    tokens: int | None
    shared: int
    at: float
    # Whether a round of the session was answered on this replica (``shared`` is known).
    answered: bool = False

    @property
    def own(self) -> int | None:
        """The tokens only this session holds there (None: not known yet)."""
        return None if self.tokens is None else max(self.tokens - self.shared, 0)


@dataclass(slots=True)
class _Claimed:
    """One replica's claims, summed: their own tokens where known, and how many are not."""

    tokens: int = 0
    unknown: int = 0


@dataclass(slots=True)
class _Ejection:
    until: float
    failures: int


@dataclass(frozen=True, slots=True)
class Served:
    """A round a replica answered: where, when it ended, and the leading tokens it
    prefilled and generated (prompt + output, when known)."""

    replica: str
    finished_at: float
    tokens: int | None


@dataclass(frozen=True, slots=True)
class Placement:
    """One round's decision as the timeline shows it."""

    session_id: str
    response_id: str
    # 0 for a turn's first round; the tool loop's later rounds count up.
    round: int
    purpose: Purpose
    at: float
    decision: Decision


class PlacementBook:
    def __init__(
        self,
        replicas: Iterable[str],
        *,
        eject_seconds: float,
        residency: ResidencyTracker | None = None,
        max_served: int = 10_000,
        max_sessions: int = 10_000,
        claim_seconds: float = 900.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.replicas = list(replicas)
        self.eject_seconds = eject_seconds
        self.residency = residency
        self.max_served = max_served
        self.max_sessions = max_sessions
        self._clock = clock
        self._ejections: dict[str, _Ejection] = {}
        self._loads: dict[str, Load | None] = {}
        self._served: OrderedDict[str, Served] = OrderedDict()
        self._decisions: OrderedDict[str, deque[Placement]] = OrderedDict()
        # Claims by session key, oldest first (an idle session's claim lapses).
        self.claim_seconds = claim_seconds
        self._claims: OrderedDict[str, Claim] = OrderedDict()
        self._claimed: dict[str, _Claimed] = {}

    def now(self) -> float:
        return self._clock()

    # -- health -------------------------------------------------------------------------

    def eject(self, replica: str, cause: str) -> float:
        """Takes ``replica`` out for a back-off (longer for each failure in a row) and drops
        its residency (it may be restarting with an empty cache: never place on what it
        held before); returns the seconds."""
        now = self.now()
        ejection = self._ejections.get(replica)
        failures = 1 if ejection is None else ejection.failures + 1
        seconds = self.eject_seconds * min(1 << (failures - 1), MAX_BACKOFF_FACTOR)
        self._ejections[replica] = _Ejection(now + seconds, failures)
        metrics.REPLICA_EJECTIONS.labels(replica, cause).inc()
        if self.residency is not None and replica in self.residency.replica_names:
            self.residency.lost(replica, "ejected")
        return seconds

    def healthy(self, replica: str) -> None:
        """The replica answered: its failures in a row start again from none (an ejection
        under way still runs out first)."""
        ejection = self._ejections.get(replica)
        if ejection is not None and ejection.until <= self.now():
            del self._ejections[replica]

    def ejected(self) -> frozenset[str]:
        now = self.now()
        return frozenset(name for name, e in self._ejections.items() if e.until > now)

    # -- load ---------------------------------------------------------------------------

    def set_load(self, replica: str, load: Load | None) -> None:
        self._loads[replica] = load

    def load(self, replica: str) -> Load | None:
        return self._loads.get(replica)

    # -- rounds served ------------------------------------------------------------------

    def served(self, key: str, replica: str, tokens: int | None) -> None:
        """``key`` (a response id) was answered by ``replica``."""
        self._served[key] = Served(replica, self.now(), tokens)
        self._served.move_to_end(key)
        while len(self._served) > self.max_served:
            self._served.popitem(last=False)

    def served_by(self, key: str) -> Served | None:
        return self._served.get(key)

    # -- claims -------------------------------------------------------------------------

    def claim(self, key: str, replica: str, tokens: int | None, cached: int | None = None) -> None:
        """Session ``key`` is placed on ``replica`` and comes back with ``tokens`` (None:
        unknown; a known size is kept until a new one is known on the same replica);
        ``cached``: a round of it was answered there, with that many prompt tokens found
        cached (the first such round on this replica says what the session shares)."""
        old = self._claims.pop(key, None)
        same = old is not None and old.replica == replica
        if old is not None:
            self._count(old, -1)
            if tokens is None and same:
                tokens = old.tokens
        if old is not None and same and old.answered:
            shared, answered = old.shared, True
        else:
            shared, answered = cached or 0, cached is not None
        claim = Claim(replica, tokens, shared, self.now(), answered)
        self._claims[key] = claim
        self._count(claim, 1)
        self._lapse()

    def claim_of(self, key: str) -> Claim | None:
        return self._claims.get(key)

    def committed(self, excluding: str | None = None) -> dict[str, int]:
        """Per replica, the tokens only the live sessions placed there hold (their own
        part: a prefix they share counts once, with the session that brought it), but for
        session ``excluding``'s claim. A claim of unknown size counts as the mean of the
        known ones (one token while none is known: then claims are counted)."""
        self._lapse()
        sizes = sum(c.tokens for c in self._claimed.values())
        sized = len(self._claims) - sum(c.unknown for c in self._claimed.values())
        mean = sizes // sized if sized else 1
        totals = {name: c.tokens + c.unknown * mean for name, c in self._claimed.items()}
        mine = None if excluding is None else self._claims.get(excluding)
        if mine is not None and mine.replica in totals:
            own = mine.own
            totals[mine.replica] -= mean if own is None else own
        return totals

    def _count(self, claim: Claim, sign: int) -> None:
        claimed = self._claimed.setdefault(claim.replica, _Claimed())
        own = claim.own
        if own is None:
            claimed.unknown += sign
        else:
            claimed.tokens += sign * own

    def _lapse(self) -> None:
        oldest = self.now() - self.claim_seconds
        while self._claims:
            key, claim = next(iter(self._claims.items()))
            if claim.at > oldest and len(self._claims) <= self.max_sessions:
                break
            del self._claims[key]
            self._count(claim, -1)

    # -- decisions ----------------------------------------------------------------------

    def record(self, placement: Placement) -> None:
        decision = placement.decision
        metrics.PLACEMENTS.labels(decision.replica, decision.reason).inc()
        if decision.resident_tokens:
            metrics.PLACEMENT_RESIDENT_TOKENS.labels(decision.replica).inc(decision.resident_tokens)
        kept = self._decisions.get(placement.session_id)
        if kept is None:
            kept = self._decisions[placement.session_id] = deque(maxlen=DECISIONS_KEPT)
            while len(self._decisions) > self.max_sessions:
                self._decisions.popitem(last=False)
        else:
            self._decisions.move_to_end(placement.session_id)
        kept.append(placement)

    def decisions(self, session_id: str) -> list[Placement]:
        return list(self._decisions.get(session_id, ()))
