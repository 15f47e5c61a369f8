"""Placement: which named replica one upstream round goes to (docs/placement.md).

A pure decision over numbers the caller gathered (``turns/runner/placing.py``): per
replica, how many leading tokens of this round's prompt it holds (the branch's blocks in
the residency tree), its load and KV size (its own ``/metrics``), how many tokens the
other live sessions placed there will come back with (the placement book's claims) and
whether it is ejected. No I/O, no clock, no state: the same candidates always give the
same decision, which is what lets the keep-warm re-warm and the agent's next turn land on
the same replica.

The rule, in order:

1. Only healthy replicas are candidates (all of them when every one is ejected: a
   back-off is a guess, and trying is better than refusing the turn).
2. One replica holds the longest resident leading prefix: it wins (``resident_prefix``),
   unless it has no *room* for this session (below) while the roomiest replica has, and
   moving there recomputes less than ``move_share`` of the session (``capacity``).
3. Several hold the same longest prefix (none at all, or only a prefix other sessions
   share): the replica that served the previous round when it has *room* for this
   session (its KV size minus the other sessions' claims there holds this session's
   tokens; an unknown size is room), else the tied replica with the most room when that
   one has room (``capacity``: the previous one had none, so this round moves to where
   the session fits). A session with no previous round goes to its *home*: the tied
   replica with the most room, the rendezvous hash of the session key breaking ties, so
   sessions starting together spread over the replicas by what they hold, not by chance
   (``home``; a longest prefix above zero keeps its reason, ``resident_prefix``).
4. The chosen replica is saturated (more waiting requests or more KV usage than the
   limits): the least-loaded unsaturated replica among those holding at least
   ``spill_share`` of the best's resident tokens, else the least-loaded replica of all
   when it is lighter than the chosen one (``spill_load``).

``failover`` is the same rule's next-best, for a round whose replica failed before any
byte reached the client (``failover``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Reason = Literal["resident_prefix", "home", "capacity", "spill_load", "failover"]
REASONS: tuple[Reason, ...] = ("resident_prefix", "home", "capacity", "spill_load", "failover")


@dataclass(frozen=True, slots=True)
class Load:
    """A replica's load as its ``/metrics`` said: requests waiting for the scheduler,
    the share (0..1) of its KV cache running requests hold, and that cache's size in
    tokens (None: the page does not say)."""

    waiting: float
    kv_usage: float
    capacity_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Candidate:
    name: str
    # Leading tokens of this round's prompt the replica holds (full blocks).
    resident_tokens: int = 0
    # None: no reading yet (never saturated, ranked after every known load).
    load: Load | None = None
    # False while the replica is ejected (refused connections, failed health).
    healthy: bool = True
    # Tokens the other live sessions placed here will come back with (their claims).
    committed_tokens: int = 0

    def room(self) -> int | None:
        """KV tokens left here once the other sessions' claims are held (None: the
        replica's KV size is unknown)."""
        capacity = None if self.load is None else self.load.capacity_tokens
        return None if capacity is None else capacity - self.committed_tokens


@dataclass(frozen=True, slots=True)
class Limits:
    """When a replica is saturated, and how far a spill may move from the best prefix."""

    max_waiting: float
    max_kv_usage: float
    # A spill target must hold at least this share of the best replica's resident tokens.
    spill_share: float
    # A session on a replica with no room for it moves to one with room when what it
    # would recompute there is less than this share of its tokens.
    move_share: float = 0.5


@dataclass(frozen=True, slots=True)
class Decision:
    replica: str
    reason: Reason
    # Resident tokens per candidate, in the order the candidates were given.
    resident: tuple[tuple[str, int], ...]
    # The rest of the healthy candidates, best first: where a failover goes next.
    fallbacks: tuple[str, ...]
    # The session's home among the healthy replicas.
    home: str

    @property
    def resident_tokens(self) -> int:
        """What the chosen replica holds of the prompt (the tokens this decision won)."""
        return dict(self.resident).get(self.replica, 0)


def home_of(session_key: str, names: Sequence[str]) -> str:
    """The session's stable replica among ``names``: rendezvous hashing (the name with the
    highest hash of key and name), so removing a replica moves only the sessions it held
    and a replica coming back takes back the same ones."""
    if not names:
        raise ValueError("no replica to place on")

    def weight(name: str) -> bytes:
        return hashlib.blake2b(f"{session_key}\x00{name}".encode(), digest_size=8).digest()

    return max(names, key=lambda name: (weight(name), name))


def saturated(candidate: Candidate, limits: Limits) -> bool:
    load = candidate.load
    return load is not None and (
        load.waiting > limits.max_waiting or load.kv_usage > limits.max_kv_usage
    )


def _load_key(candidate: Candidate) -> tuple[float, float]:
    load = candidate.load
    if load is None:
        return (math.inf, math.inf)
    return (load.waiting, load.kv_usage)


def place(
    candidates: Sequence[Candidate],
    session_key: str,
    limits: Limits,
    *,
    previous: str | None = None,
    demand: int | None = None,
) -> Decision:
    """Where this round goes. ``session_key``: the session (a multi-agent tree's root
    session, so the whole tree shares one home); ``previous``: the replica that served
    the previous round of this branch (the parent turn, or this turn's last round);
    ``demand``: the tokens this session comes back with (None: unknown, any room fits)."""
    if not candidates:
        raise ValueError("no replica to place on")
    pool = [c for c in candidates if c.healthy] or list(candidates)
    by_name = {c.name: c for c in pool}
    best_tokens = max(c.resident_tokens for c in pool)
    tied = [c for c in pool if c.resident_tokens == best_tokens]
    home = _home(pool, session_key)
    reason: Reason = "resident_prefix" if best_tokens > 0 else "home"
    if len(tied) == 1:
        chosen = tied[0]
        roomiest = by_name[home]
        if _worth_moving(chosen, roomiest, demand, limits):
            chosen, reason = roomiest, "capacity"
    else:
        roomiest = by_name[_home(tied, session_key)]
        chosen = by_name.get(previous or "", roomiest)
        if chosen not in tied:
            chosen = roomiest
        elif not _fits(chosen, demand) and roomiest is not chosen and _fits(roomiest, demand):
            chosen, reason = roomiest, "capacity"
    if saturated(chosen, limits):
        spilled = _spill(pool, chosen, best_tokens, limits)
        if spilled is not None:
            chosen, reason = spilled, "spill_load"
    ranked = sorted(
        pool,
        key=lambda c: (-c.resident_tokens, c.name != previous, c.name != home, _load_key(c)),
    )
    return Decision(
        replica=chosen.name,
        reason=reason,
        resident=tuple((c.name, c.resident_tokens) for c in candidates),
        fallbacks=tuple(c.name for c in ranked if c is not chosen),
        home=home,
    )


def _home(tied: Sequence[Candidate], session_key: str) -> str:
    """Among ``tied`` (replicas holding the same prefix): the one with the most room, the
    session's rendezvous hash breaking ties (while any replica's KV size is unknown, the
    fewest claimed tokens come first)."""
    rooms = [c.room() for c in tied]
    if any(room is None for room in rooms):
        spare = {c.name: -c.committed_tokens for c in tied}
    else:
        spare = {c.name: room for c, room in zip(tied, rooms, strict=True) if room is not None}
    most = max(spare.values())
    return home_of(session_key, [name for name, room in spare.items() if room == most])


def _worth_moving(
    holder: Candidate, roomiest: Candidate, demand: int | None, limits: Limits
) -> bool:
    """The replica holding the longest prefix has no room for the session, the roomiest
    one has, and moving recomputes less than ``move_share`` of the session: there it
    stays warm, where it is it would be evicted again (a replica back from a restart,
    say, while the survivor holds only the prefix every session shares)."""
    if not demand or roomiest is holder or _fits(holder, demand) or not _fits(roomiest, demand):
        return False
    return holder.resident_tokens - roomiest.resident_tokens < demand * limits.move_share


def _fits(candidate: Candidate, demand: int | None) -> bool:
    room = candidate.room()
    return room is None or room >= (demand or 0)


def _spill(
    pool: Sequence[Candidate], chosen: Candidate, best: int, limits: Limits
) -> Candidate | None:
    near = [
        c
        for c in pool
        if c is not chosen
        and c.resident_tokens >= best * limits.spill_share
        and not saturated(c, limits)
    ]
    if near:
        return min(near, key=lambda c: (_load_key(c), -c.resident_tokens))
    lightest = min(pool, key=_load_key)
    if lightest is not chosen and _load_key(lightest) < _load_key(chosen):
        return lightest
    return None


def failover(decision: Decision, failed: str, ejected: frozenset[str] = frozenset()) -> Decision:
    """The next-best replica after ``failed`` (skipping ejected ones when another is
    left); a decision with reason ``failover``. Raises ``LookupError`` when none is left."""
    left = [name for name in decision.fallbacks if name != failed]
    usable = [name for name in left if name not in ejected] or left
    if not usable:
        raise LookupError("no other replica to fail over to")
    chosen = usable[0]
    return Decision(
        replica=chosen,
        reason="failover",
        resident=decision.resident,
        fallbacks=tuple(name for name in left if name != chosen),
        home=decision.home,
    )
