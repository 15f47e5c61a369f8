"""Keep paused agents warm: which paused session to re-warm, when, and within what bounds.

An agent is *paused* when its last turn ended in a function call: it is running the tool
and will be back with the output, and its next prompt will start with everything the
paused turn's prompt and output held. If the replica it was routed to evicts that
prefix meanwhile (its KV events say so: ``cache/residency/``), the next turn prefills it
all again. The one lever vLLM offers is to prefill it again *before* the agent comes
back: a prewarm of the session's continuation (``turns/prewarm.py``), sent through the
same path and routing coordinates as the next turn (``serving/keep_warm.py`` runs it).

This module decides, and keeps the record; it does no I/O. Bounds:

- a re-warm only when the paused turn's own leading prefix is seen *dropping* on a
  replica (with its token ids: the block tree's leading blocks fell below the most seen
  since the pause), or, without token ids, when the session's blocks were removed after
  it paused;
- never for a session paused longer than ``ttl_seconds``: it is forgotten;
- within per-tenant and global budgets of re-warm tokens per minute (a sliding minute;
  a re-warm is charged its estimate when it starts, then what vLLM actually prefilled);
- never while the replica is under pressure: the caller asks ``serving/keep_warm.py``'s
  probe of the replica's own ``/metrics`` (none configured: that bound is not applied,
  and each record says so);
- never for more paused sessions than the replica's KV cache holds (its size from its own
  ``/metrics``): the paused sessions on a replica are ranked by when they paused (the
  earliest is expected back first), and only those whose blocks, added up in that order,
  fit ``capacity_share`` of its cache are re-warmed; re-warming the others could only
  evict them (measured: docs/benchmarks/keep_warm). Blocks are counted by their place in
  the prefix chain, so a prefix the sessions share (a system prompt, tools) counts once;
  a session without token ids counts its whole prompt + output;
- with ``when="before_return"``, a prefix evicted early in a pause is re-warmed only
  ``lead_seconds`` before the agent is expected back (the median of the session's own
  earlier pauses), so the re-warmed blocks do not crowd others out for the whole pause; a
  session with no earlier pause is re-warmed when evicted;
- at most one re-warm of a session in flight, cancelled when the agent returns first, and
  at most ``max_rewarms_per_pause`` per pause (evicted again after that, the replica cannot
  hold every paused session: another re-warm would evict another one).

Each re-warm is recorded (when, why, on which replica, tokens spent) and settled by the
session's next turn: *paid off* when that turn came back warm (its cached tokens cover
every full block of the paused turn's prompt, the bench's "returned warm"), *wasted*
otherwise, or when the agent never came back within the TTL.
"""

from __future__ import annotations

import statistics
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agentic_api import metrics
from agentic_api.cache.residency.tracker import ResidencyTracker
from agentic_api.cache.residency.tree import chain_keys
from agentic_api.wire.events import CONTINUABLE_STATUSES
from agentic_api.wire.requests import CreateResponseRequest

WINDOW_SECONDS = 60.0
# Residency resets after which a replica holds nothing at all: its cache was emptied
# (AllBlocksCleared) or its engine restarted. (A gap or a lost publisher only means we
# stopped knowing.)
EMPTIED = frozenset({"cleared", "restart"})
# Re-warm records kept per session (the admin timeline shows them).
RECORDS_KEPT = 16

Outcome = Literal["running", "done", "paid_off", "wasted", "cancelled", "failed"]
SkipReason = Literal["tenant_budget", "budget", "pressure", "capacity", "ttl"]
PauseOn = Literal["function_call", "tools_offered"]
When = Literal["evicted", "before_return"]
# Earlier pause lengths kept per session for its expected return.
PAUSES_KEPT = 8


class Cancellable(Protocol):
    def cancel(self, msg: Any | None = None) -> bool: ...


@dataclass(slots=True)
class Rewarm:
    """One re-warm of a paused turn's prefix, as the timeline shows it."""

    session_id: str
    response_id: str  # the paused turn whose continuation was warmed
    tenant_id: str
    at: float
    # Its pause's key: the session's id, or a waiting agent's (``agent_waiting``).
    key: str
    reason: str
    replica: str | None
    # Leading tokens of the paused turn's prompt + output resident before (None: no ids).
    resident_before: int | None
    estimated_tokens: int
    # The paused turn's prompt tokens: the next turn is warm when it finds them all cached.
    paused_input_tokens: int
    # Whether the replica's pressure was checked (False: no metrics URL for it).
    pressure_checked: bool
    # When the agent was expected back (its earlier pauses' median; None: no earlier one).
    expected_return_at: float | None = None
    outcome: Outcome = "running"
    input_tokens: int | None = None
    cached_tokens: int | None = None
    finished_at: float | None = None
    error: str | None = None
    # The next turn's cached tokens, once it came.
    next_cached_tokens: int | None = None

    @property
    def spent_tokens(self) -> int:
        """What vLLM had to prefill for it (its estimate until it answered)."""
        if self.input_tokens is None:
            return self.estimated_tokens if self.outcome == "running" else 0
        return max(self.input_tokens - (self.cached_tokens or 0), 0)


@dataclass(slots=True)
class Pause:
    session_id: str
    response_id: str
    tenant_id: str
    salt_epoch: int
    cache_salt: str
    # The paused turn's request: its continuation's prewarm is built from it.
    request: CreateResponseRequest
    paused_at: float
    input_tokens: int
    output_tokens: int
    # A pause inside a running turn: an agent of a multi-agent tree waiting on its
    # subagents (``agent_waiting``). ``key`` tells it apart from its session's own pause,
    # ``warm`` re-warms its prefix (sends it upstream, returns the usage) in place of the
    # stored turn's continuation, ``tokens`` are its prompt + output ids when known.
    key: str = ""
    warm: Callable[[], Awaitable[dict[str, Any]]] | None = None
    tokens: Sequence[int] | None = None
    # When the agent is expected back, from its earlier pauses (None: none seen).
    expected_return_at: float | None = None
    # Most leading tokens of prompt + output seen resident since the pause, and where.
    peak: int = 0
    peak_replica: str | None = None
    rewarm: Rewarm | None = None
    # Re-warms sent for this pause.
    rewarms: int = 0
    task: Cancellable | None = None
    skipped: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if not self.key:
            self.key = self.session_id


@dataclass(frozen=True, slots=True)
class Due:
    """A paused session whose prefix went: re-warm it (after the pressure check)."""

    pause: Pause
    replica: str | None
    resident: int | None
    estimate: int
    reason: str


class _Window:
    """Tokens spent in the last minute."""

    def __init__(self) -> None:
        self._spent: deque[tuple[float, Rewarm]] = deque()

    def add(self, now: float, rewarm: Rewarm) -> None:
        self._spent.append((now, rewarm))

    def used(self, now: float) -> int:
        while self._spent and now - self._spent[0][0] > WINDOW_SECONDS:
            self._spent.popleft()
        return sum(rewarm.spent_tokens for _, rewarm in self._spent)


class KeepWarm:
    """One per process; every method runs on the event loop (no lock needed)."""

    def __init__(
        self,
        residency: ResidencyTracker,
        *,
        ttl_seconds: float,
        tokens_per_minute: int,
        tenant_tokens_per_minute: int,
        max_rewarms_per_pause: int = 1,
        pause_on: PauseOn = "function_call",
        when: When = "evicted",
        lead_seconds: float = 2.0,
        max_sessions: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.residency = residency
        self.ttl_seconds = ttl_seconds
        self.tokens_per_minute = tokens_per_minute
        self.tenant_tokens_per_minute = tenant_tokens_per_minute
        self.max_rewarms_per_pause = max_rewarms_per_pause
        self.pause_on = pause_on
        self.when = when
        self.lead_seconds = lead_seconds
        self.max_sessions = max_sessions
        self._clock = clock
        self._paused: OrderedDict[str, Pause] = OrderedDict()
        self._global = _Window()
        self._tenants: dict[str, _Window] = {}
        # Records by session (bounded), and the ones not yet settled by a next turn.
        self._records: OrderedDict[str, deque[Rewarm]] = OrderedDict()
        # How long each session's earlier pauses lasted (its tool calls), newest last.
        self._pause_lengths: OrderedDict[str, deque[float]] = OrderedDict()

    def now(self) -> float:
        return self._clock()

    # -- the turns' side ----------------------------------------------------------------

    def turn_started(self, session_id: str) -> None:
        """The agent is back: stop keeping the session warm (a re-warm in flight is
        cancelled; one that finished waits for this turn's result to be settled)."""
        pause = self._paused.pop(session_id, None)
        if pause is None:
            return
        self._learn_pause(session_id, self.now() - pause.paused_at)
        if pause.rewarm is None:
            return
        if pause.rewarm.outcome == "running" and pause.task is not None:
            pause.task.cancel()

    def turn_finished(
        self,
        *,
        session_id: str,
        response_id: str,
        tenant_id: str,
        salt_epoch: int,
        cache_salt: str,
        request: CreateResponseRequest,
        final: dict[str, Any],
    ) -> None:
        """Settles the session's re-warms by this turn's cache hit; pauses the session
        when this turn ended in a function call the client will answer."""
        usage = final.get("usage") or {}
        cached = (usage.get("input_tokens_details") or {}).get("cached_tokens")
        for rewarm in self._records.get(session_id, ()):
            if rewarm.outcome == "done":
                self._settle(rewarm, cached if isinstance(cached, int) else 0)
        if not _pauses(request, final, self.pause_on):
            return
        pause = Pause(
            session_id=session_id,
            response_id=response_id,
            tenant_id=tenant_id,
            salt_epoch=salt_epoch,
            cache_salt=cache_salt,
            request=request,
            paused_at=self.now(),
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
        )
        pause.expected_return_at = self._expected_return(session_id, pause.paused_at)
        self._keep(pause)

    def _keep(self, pause: Pause) -> None:
        self._paused[pause.key] = pause
        self._paused.move_to_end(pause.key)
        while len(self._paused) > self.max_sessions:
            self._paused.popitem(last=False)

    def agent_waiting(self, pause: Pause) -> None:
        """An agent of a running multi-agent tree waits on its subagents: a paused
        session of its own (``pause.key``, ``pause.warm``) until ``agent_back``. Its
        prefix is the start of every later round of it, so one evicted while it waits is
        re-warmed as a paused turn's is, within the same bounds."""
        self._keep(pause)

    def agent_back(self, pause: Pause) -> None:
        """The waiting agent goes on: it needs no keeping warm (a re-warm in flight is
        cancelled; one done is settled by ``agent_round``)."""
        if self._paused.get(pause.key) is pause:
            del self._paused[pause.key]
        running = pause.rewarm is not None and pause.rewarm.outcome == "running"
        if running and pause.task is not None:
            pause.task.cancel()

    def agent_round(self, pause: Pause, cached_tokens: int) -> None:
        """The waiting agent's next round found ``cached_tokens``: settles its re-warm."""
        if pause.rewarm is not None and pause.rewarm.outcome == "done":
            self._settle(pause.rewarm, cached_tokens)

    def _learn_pause(self, session_id: str, length: float) -> None:
        lengths = self._pause_lengths.setdefault(session_id, deque(maxlen=PAUSES_KEPT))
        self._pause_lengths.move_to_end(session_id)
        lengths.append(length)
        while len(self._pause_lengths) > self.max_sessions:
            self._pause_lengths.popitem(last=False)

    def _expected_return(self, session_id: str, paused_at: float) -> float | None:
        """``paused_at`` plus the median of the session's earlier pauses (the median: one
        long tool call does not move it); None before its first pause ended."""
        lengths = self._pause_lengths.get(session_id)
        return paused_at + statistics.median(lengths) if lengths else None

    def _settle(self, rewarm: Rewarm, next_cached: int) -> None:
        rewarm.next_cached_tokens = next_cached
        size = self._block_size(rewarm.replica) or 1
        # "Returned warm" (the bench's definition): every full block of the paused turn's
        # prompt, which starts the next prompt, was served from the cache.
        needed = (rewarm.paused_input_tokens // size) * size
        rewarm.outcome = "paid_off" if next_cached >= needed and needed > 0 else "wasted"
        metrics.KEEP_WARM_REWARMS.labels(rewarm.outcome).inc()

    # -- the loop's side ----------------------------------------------------------------

    def due(self, tokens_of: Callable[[Pause], Sequence[int] | None]) -> Iterator[Due]:
        """Paused sessions to re-warm now, within the TTL and the budgets (the caller
        checks pressure, then calls ``started`` or ``skip``). ``tokens_of``: the paused
        turn's prompt + output token ids, when this process has them."""
        now = self.now()
        for key, pause in list(self._paused.items()):
            if now - pause.paused_at > self.ttl_seconds:
                del self._paused[key]
                metrics.KEEP_WARM_SKIPPED.labels("ttl").inc()
                if pause.rewarm is not None and pause.rewarm.outcome == "done":
                    # Warmed for an agent that did not come back in time.
                    pause.rewarm.outcome = "wasted"
                    metrics.KEEP_WARM_REWARMS.labels("wasted").inc()
                continue
            if pause.rewarm is not None and pause.rewarm.outcome == "running":
                continue
            if pause.rewarms >= self.max_rewarms_per_pause:
                # Evicted again after its re-warms: the replica cannot hold every paused
                # session, and re-warming this one would evict another (measured: a
                # cascade of wasted re-warms; docs/benchmarks/keep_warm).
                continue
            found = self._evicted(pause, tokens_of(pause))
            if found is None:
                continue
            replica, resident, estimate = found
            reason_why = (
                "the replica's cache was emptied while paused"
                if self._emptied(pause, replica)
                else "evicted while paused"
            )
            if self.when == "before_return" and pause.expected_return_at is not None:
                if now < pause.expected_return_at - self.lead_seconds:
                    # Evicted early: warming it now would hold its blocks (and push out
                    # others') for the rest of the pause; ask again next tick.
                    continue
                reason_why += "; re-warmed ahead of its expected return"
            reason = self._over_budget(pause.tenant_id, estimate, now)
            if reason is not None:
                self.skip(pause, reason)
                continue
            yield Due(pause, replica, resident, estimate, reason_why)

    def _evicted(
        self, pause: Pause, tokens: Sequence[int] | None
    ) -> tuple[str | None, int | None, int] | None:
        if tokens:
            dropped = self._prefix_dropped(pause, tokens)
            if not isinstance(dropped, str):
                return dropped
        # No token ids, or a replica's figure is unknown (blocks stored before this
        # process listened, none grafted back): a drop cannot be read off the prefix, so
        # the session's evictions since the pause say it.
        for view in self.residency.session(pause.session_id):
            since = _since(pause)
            # An emptied cache (AllBlocksCleared: a prefix-cache reset, vLLM 0.34's
            # /checkpoint/prepare) or a restarted engine names no block: it took them all.
            if any(eviction.at >= since for eviction in view.evictions) or any(
                reset.at >= since and reset.reason in EMPTIED for reset in view.resets
            ):
                return view.replica, None, pause.input_tokens + pause.output_tokens
        return None

    def _emptied(self, pause: Pause, replica: str | None) -> bool:
        """Whether ``replica`` (any, when None) lost its whole cache during the pause."""
        since = _since(pause)
        return any(
            reset.at >= since and reset.reason in EMPTIED
            for view in self.residency.session(pause.session_id)
            if replica is None or view.replica == replica
            for reset in view.resets
        )

    def _prefix_dropped(
        self, pause: Pause, tokens: Sequence[int]
    ) -> tuple[str | None, int | None, int] | Literal["unknown"] | None:
        """Whether the paused turn's leading prefix fell on the replica that held it (the
        re-warm's replica, what is resident there and the estimate), None when it did
        not, or "unknown" when the replica that matters has an unknown figure."""
        views = self.residency.prefix(tokens, pause.cache_salt)
        known = [view for view in views if view.known]
        if pause.peak_replica is not None:
            where = next((v for v in views if v.replica == pause.peak_replica), None)
            if where is not None and not where.known:
                return "unknown"
            here = where.resident_tokens if where is not None else 0
        else:
            best_known = max((view.resident_tokens for view in known), default=0)
            if best_known == 0 and len(known) < len(views):
                # Held nowhere that is known, and somewhere unknown: no peak to fall from.
                return "unknown"
            here = best_known
        best = max(known, key=lambda view: view.resident_tokens, default=None)
        if best is None:
            return None
        if here >= pause.peak:
            if best.resident_tokens > pause.peak:
                pause.peak, pause.peak_replica = best.resident_tokens, best.replica
            return None
        # Its leading prefix fell where it was: what is missing must be prefilled.
        return pause.peak_replica, here, max(len(tokens) - here, 0)

    def _over_budget(self, tenant_id: str, estimate: int, now: float) -> SkipReason | None:
        tenant = self._tenants.setdefault(tenant_id, _Window())
        if tenant.used(now) + estimate > self.tenant_tokens_per_minute:
            return "tenant_budget"
        if self._global.used(now) + estimate > self.tokens_per_minute:
            return "budget"
        return None

    def fits(
        self,
        due: Due,
        capacity_tokens: int,
        share: float,
        tokens_of: Callable[[Pause], Sequence[int] | None] = lambda _pause: None,
    ) -> bool:
        """Whether ``due``'s session is among the paused sessions its replica can hold:
        the earliest paused first, each adding the blocks of its prompt and output that
        those before it do not already hold (``tokens_of``: its token ids; without them
        it adds its whole prompt + output)."""
        room = capacity_tokens * share
        size = self._block_size(due.replica)
        blocks: set[int] = set()
        loose = 0
        for pause in sorted(self._paused.values(), key=lambda paused: paused.paused_at):
            replica = due.replica if pause is due.pause else _replica_of(pause)
            if replica != due.replica:
                continue
            tokens = tokens_of(pause) if size else None
            if tokens and size:
                blocks.update(chain_keys(tokens, size, pause.cache_salt))
            else:
                loose += pause.input_tokens + pause.output_tokens
            if pause is due.pause:
                return len(blocks) * (size or 0) + loose <= room
        return False

    def skip(self, pause: Pause, reason: SkipReason) -> None:
        """Not now (counted once per pause and reason; tried again next tick)."""
        if reason not in pause.skipped:
            pause.skipped.add(reason)
            metrics.KEEP_WARM_SKIPPED.labels(reason).inc()

    def started(self, due: Due, task: Cancellable | None, *, pressure_checked: bool) -> Rewarm:
        now = self.now()
        pause = due.pause
        earlier = pause.rewarm
        if earlier is not None and earlier.outcome == "done":
            # Its blocks went again before the agent came back: that one did not pay off.
            earlier.outcome = "wasted"
            metrics.KEEP_WARM_REWARMS.labels("wasted").inc()
        rewarm = Rewarm(
            session_id=pause.session_id,
            response_id=pause.response_id,
            tenant_id=pause.tenant_id,
            at=now,
            key=pause.key,
            reason=due.reason,
            replica=due.replica,
            resident_before=due.resident,
            estimated_tokens=due.estimate,
            paused_input_tokens=pause.input_tokens,
            pressure_checked=pressure_checked,
            expected_return_at=pause.expected_return_at,
        )
        pause.rewarm, pause.task = rewarm, task
        pause.rewarms += 1
        # Whatever comes back next is measured against the prefix as warmed now.
        pause.peak, pause.peak_replica = 0, None
        self._global.add(now, rewarm)
        self._tenants.setdefault(pause.tenant_id, _Window()).add(now, rewarm)
        records = self._records.setdefault(pause.session_id, deque(maxlen=RECORDS_KEPT))
        self._records.move_to_end(pause.session_id)
        records.append(rewarm)
        while len(self._records) > self.max_sessions:
            self._records.popitem(last=False)
        return rewarm

    def forget(self, key: str) -> None:
        """No longer keep the session (or waiting agent) warm: its tenant is disabled or
        gone."""
        self._paused.pop(key, None)

    def is_paused(self, pause: Pause) -> bool:
        return self._paused.get(pause.key) is pause

    def attach(self, rewarm: Rewarm, task: Cancellable) -> None:
        pause = self._paused.get(rewarm.key)
        if pause is not None and pause.rewarm is rewarm:
            pause.task = task

    def finished(self, rewarm: Rewarm, usage: dict[str, Any]) -> None:
        rewarm.input_tokens = int(usage.get("input_tokens") or 0)
        rewarm.cached_tokens = int(
            (usage.get("input_tokens_details") or {}).get("cached_tokens") or 0
        )
        rewarm.finished_at = self.now()
        rewarm.outcome = "done"
        metrics.KEEP_WARM_TOKENS.inc(rewarm.spent_tokens)

    def ended(self, rewarm: Rewarm, outcome: Literal["cancelled", "failed"], error: str) -> None:
        rewarm.outcome = outcome
        rewarm.error = error
        rewarm.finished_at = self.now()
        metrics.KEEP_WARM_REWARMS.labels(outcome).inc()

    # -- the views' side ----------------------------------------------------------------

    def records(self, session_id: str) -> list[Rewarm]:
        return list(self._records.get(session_id, ()))

    def paused_sessions(self) -> list[str]:
        """The keys of what is paused: session ids, and waiting agents' keys."""
        return list(self._paused)

    def _block_size(self, replica: str | None) -> int | None:
        # An empty sequence: only each replica's block size is of interest.
        for view in self.residency.prefix((), None):
            if (replica is None or view.replica == replica) and view.block_size:
                return view.block_size
        return None


def _replica_of(pause: Pause) -> str | None:
    """Where the paused session's prefix was last seen or re-warmed."""
    if pause.peak_replica is not None:
        return pause.peak_replica
    return None if pause.rewarm is None else pause.rewarm.replica


def _pauses(request: CreateResponseRequest, final: dict[str, Any], pause_on: PauseOn) -> bool:
    """Whether the turn left its agent running a tool it will answer: a completed, stored
    turn whose last output is a function call (or, with ``tools_offered``, a continuable
    turn that offered tools). MCP tools are left out: the gateway's own tool loop changes
    that prompt, which a prewarm cannot reproduce (``turns/prewarm.py``)."""
    status = final.get("status")
    if not request.store or request.prewarms:
        return False
    tools = request.tools or ()
    if any(tool.get("type") == "mcp" for tool in tools):
        return False
    if pause_on == "tools_offered":
        # A turn cut at max_output_tokens is continued like a completed one.
        return status in CONTINUABLE_STATUSES and bool(tools) and request.tool_choice != "none"
    output = final.get("output") or []
    return status == "completed" and bool(output) and output[-1].get("type") == "function_call"


def _since(pause: Pause) -> float:
    """From when a loss counts against the pause: its start, or its last re-warm's end."""
    if pause.rewarm is not None and pause.rewarm.finished_at is not None:
        return pause.rewarm.finished_at
    return pause.paused_at
