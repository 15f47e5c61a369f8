"""Which replica each upstream round is sent to, with named replicas
(``AGENTIC_UPSTREAM_REPLICAS``; docs/placement.md): a turn's rounds, and the calls that
prepare a turn without committing it (prewarm, keep-warm's re-warms, ``/compact``, the
``input_tokens`` prefill) or have no stored turn (Anthropic Messages). Gathers what the
rule needs — each replica's resident share of the branch's prefix (the residency tree,
read with the parent's own prompt + output token ids), its load and health (the placement
book, kept by ``serving/replica_probe.py``), the replica that served the previous round —
hands it to the pure rule (``cache/placement.py``), records the decision (timeline,
metrics, the round's span) and gives the round the client to send with. The client
sends; it never decides.

A round refused before any byte reached the client (connection refused, a 5xx or a
timeout before the answer began) is placed once more, on the rule's next-best replica
(``failover``), at most once per turn; refused there too, the refusal is the answer (and
an Idempotency-Key's recorded outcome: ``turns/runner/round.py``), so one key never runs
on a third replica. A refused connection also ejects the replica for a back-off and drops
its residency. With one upstream URL (a router, one vLLM) nothing here changes the round.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager as AsyncContextManager
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from agentic_api import tracing
from agentic_api.cache.placement import Candidate, Decision, Limits, failover, place
from agentic_api.cache.placement_book import Placement, PlacementBook, Purpose, Served
from agentic_api.cache.recent import TokenArtifact
from agentic_api.cache.residency.tracker import PrefixOnReplica, SessionOnReplica
from agentic_api.errors import ApiError
from agentic_api.log import get_logger
from agentic_api.runtime import Runtime
from agentic_api.storage.models import Response
from agentic_api.turns.data.prepared import PreparedTurn
from agentic_api.turns.runner.tokens import stored_tokens
from agentic_api.upstream.client import UpstreamClient
from agentic_api.upstream.errors import UpstreamInterrupted

log = get_logger("agentic_api.turns.runner.placing")
T = TypeVar("T")
S = TypeVar("S")

# Refusals that mean the replica itself is gone (not this request's fault): eject it.
_UNREACHABLE = frozenset({"upstream_unreachable", "upstream_connection_error"})
# A refusal another replica would repeat: the request's own fault, or our credentials.
_NOT_RETRIED = frozenset({"upstream_authentication_failed"})


@dataclass(frozen=True, slots=True)
class RoundSize:
    """An answered round's prompt + output tokens, and how many of its prompt tokens the
    replica found cached (None: the answer did not say)."""

    tokens: int
    cached: int | None = None


@dataclass(frozen=True, slots=True)
class Target:
    """Where a round goes: the client to send with, and why (None: one upstream URL)."""

    client: UpstreamClient
    decision: Decision | None = None

    @property
    def replica(self) -> str | None:
        return None if self.decision is None else self.decision.replica


def placement_key(turn: PreparedTurn) -> str:
    """The key a session's home is hashed from: its session id. A multi-agent tree's
    subagents are branches of the root's session, so they share its home; a tree whose
    members get sessions of their own should hand the root's session id here."""
    return turn.lineage.session_id


@dataclass(frozen=True, slots=True)
class Work:
    """What is placed, as the rule's inputs are read: the session (decisions are kept
    under it, its home hashed from ``home_key``), the key its rounds are recorded under
    and shown with (``shown_id``), the key of the round before it (whose replica comes
    next), and where the branch's tokens come from (the parent response; without one,
    the session's blocks when ``session_tally``)."""

    session_id: str
    home_key: str
    shown_id: str
    previous_id: str | None
    tenant_id: str
    # The tenant's cache salt, under which the branch's blocks are looked up.
    salt: str | None
    parent: Response | None
    purpose: Purpose
    session_tally: bool = False

    @classmethod
    def of_turn(cls, turn: PreparedTurn, purpose: Purpose) -> Work:
        parent = turn.parent
        # A prewarm (a client's, or keep-warm's) warms the turn that continues its parent:
        # shown with the parent (where the timeline looks), and recorded as the parent's
        # last server (where the next turn looks).
        shown = parent.id if purpose == "prewarm" and parent is not None else turn.response_id
        return cls(
            session_id=turn.lineage.session_id,
            home_key=placement_key(turn),
            shown_id=shown,
            previous_id=None if parent is None else parent.id,
            tenant_id=turn.caller.tenant_id,
            salt=turn.caller.cache_salt,
            parent=parent,
            purpose=purpose,
            session_tally=parent is not None,
        )

    @classmethod
    def of_session(cls, tenant_id: str, session_id: str, purpose: Purpose) -> Work:
        """A stateless session's request (the Anthropic Messages API): no stored branch,
        so the session's blocks per replica, and its own last replica before it."""
        key = f"session:{tenant_id}:{session_id}"
        return cls(
            session_id=session_id,
            home_key=session_id,
            shown_id=key,
            previous_id=key,
            tenant_id=tenant_id,
            salt=None,
            parent=None,
            purpose=purpose,
            session_tally=True,
        )


class RoundPlacer:
    """One turn's (or prewarm's, compaction's, message's) placement, round after round."""

    def __init__(
        self,
        services: Runtime,
        work: Work,
        parent_tokens: Awaitable[TokenArtifact | str] | None = None,
    ) -> None:
        self.services = services
        self.work = work
        # The parent's token ids being read already (the turn's token plan), if so.
        self._parent_tokens = parent_tokens
        self.rounds = 0
        self.failed_over = False
        # The replica that answered this work's previous round, and when.
        self._last: Served | None = None
        self._branch: Sequence[int] | None = None
        self._branch_read = False
        # Each replica's KV block size, as its events said (read with the residency).
        self._block_sizes: dict[str, int | None] = {}

    @classmethod
    def for_turn(
        cls,
        services: Runtime,
        turn: PreparedTurn,
        purpose: Purpose = "turn",
        *,
        parent_tokens: Awaitable[TokenArtifact | str] | None = None,
    ) -> RoundPlacer:
        return cls(services, Work.of_turn(turn, purpose), parent_tokens)

    @property
    def book(self) -> PlacementBook | None:
        return self.services.placement

    async def target(self) -> Target:
        """Where the next round goes."""
        book = self.book
        if book is None:
            return Target(self.services.upstream)
        candidates = await self._candidates(book)
        previous = self._previous()
        size, demand = self._size(book)
        decision = place(
            candidates,
            self.work.home_key,
            self._limits(),
            previous=None if previous is None else previous.replica,
            demand=demand,
            size=size,
        )
        book.claim(self.work.home_key, decision.replica, size)
        return self._chosen(book, decision)

    async def call(
        self,
        send: Callable[[UpstreamClient], Awaitable[T]],
        tokens: Callable[[T], RoundSize | None],
    ) -> T:
        """One JSON round of this work: placed, sent, failed over once when refused before
        any byte reached the client, its answer recorded (``tokens``: its prompt + output,
        as the answer says). A multi-agent tree's agent rounds, each a JSON call, take this
        path with the root turn's placer, so the whole tree shares the root's placement."""
        target = await self.target()
        while True:
            try:
                answer = await send(target.client)
            except ApiError as exc:
                retry = self.after_refusal(target, exc)
                if retry is None:
                    raise
                target = retry
                continue
            self.answered(target, tokens(answer))
            return answer

    def after_refusal(self, target: Target, error: ApiError) -> Target | None:
        """``target``'s round was refused before any byte reached the client: eject its
        replica where it could not be reached, and the next-best target when this turn
        has not failed over yet (None: raise the refusal)."""
        book, decision = self.book, target.decision
        if book is None or decision is None:
            return None
        if error.code in _UNREACHABLE:
            seconds = book.eject(decision.replica, "refused")
            log.warning(
                "replica ejected", replica=decision.replica, cause="refused", seconds=seconds
            )
        if self.failed_over:
            # Refused on two replicas, the first perhaps after the model had started: an
            # Idempotency-Key records this refusal as its outcome, so a retry of the key
            # answers it and never places the round again.
            error.after_model = True
            return None
        if (
            isinstance(error, UpstreamInterrupted)  # it reached the model: never twice
            or error.status_code < 500
            or error.code in _NOT_RETRIED
        ):
            return None
        try:
            retried = failover(decision, decision.replica, book.ejected())
        except LookupError:
            return None
        self.failed_over = True
        log.info(
            "round failed over",
            failed=decision.replica,
            replica=retried.replica,
            error=error.code,
            shown_id=self.work.shown_id,
        )
        return self._chosen(book, retried, counted=False)

    def answered(self, target: Target, size: RoundSize | None) -> None:
        """The round on ``target`` was answered (``size``: its prompt + output and cached
        tokens, when the answer said): the next round, and the turn continuing this one,
        start there."""
        book, replica = self.book, target.replica
        if book is None or replica is None:
            return
        key = self.work.shown_id
        tokens = None if size is None else size.tokens
        book.served(key, replica, tokens)
        self._last = book.served_by(key)
        # The session comes back with this round's prompt + output: its claim's size
        # (and, on its first round there, what it found the replica already held).
        book.claim(self.work.home_key, replica, tokens, None if size is None else size.cached)

    # -- what the rule is given ---------------------------------------------------------

    def _previous(self) -> Served | None:
        if self._last is not None:
            return self._last
        previous_id, book = self.work.previous_id, self.book
        if previous_id is None or book is None:
            return None
        return book.served_by(previous_id)

    def _limits(self) -> Limits:
        settings = self.services.settings
        return Limits(
            max_waiting=settings.placement_max_waiting,
            max_kv_usage=settings.placement_max_kv_usage,
            spill_share=settings.placement_spill_share,
            move_share=settings.placement_move_share,
        )

    async def _candidates(self, book: PlacementBook) -> list[Candidate]:
        resident = await self._resident()
        ejected = book.ejected()
        previous = self._previous()
        presumed = self._presumed(previous)
        committed = book.committed(excluding=self.work.home_key)
        return [
            Candidate(
                name=name,
                resident_tokens=max(
                    resident.get(name, 0),
                    presumed if previous is not None and previous.replica == name else 0,
                ),
                load=book.load(name),
                healthy=name not in ejected,
                committed_tokens=committed.get(name, 0),
            )
            for name in book.replicas
        ]

    def _size(self, book: PlacementBook) -> tuple[int | None, int | None]:
        """The tokens this session comes back with (the branch it continues, read with
        the residency, else what its claim last said), and the room it needs: what only
        it holds, a prefix it found cached where it was placed being shared (None: not
        known yet)."""
        claim = book.claim_of(self.work.home_key)
        size = len(self._branch) if self._branch is not None else None
        if size is None and claim is not None:
            size = claim.tokens
        if size is None:
            return None, None
        return size, size - (claim.shared if claim is not None else 0)

    async def _resident(self) -> dict[str, int]:
        """Leading tokens of the branch (the parent's prompt + output) each replica
        holds, from the residency tree; without the parent's ids, the session's tally."""
        residency = self.services.residency
        if residency is None:
            return {}
        branch = await self._branch_tokens()
        views: Sequence[PrefixOnReplica | SessionOnReplica]
        if branch is not None:
            views = residency.prefix(branch, self.work.salt)
        elif self.work.session_tally:
            views = residency.session(self.work.session_id)
        else:
            views = ()
        self._block_sizes = {view.replica: view.block_size for view in views}
        return {view.replica: view.resident_tokens for view in views}

    async def _branch_tokens(self) -> Sequence[int] | None:
        if not self._branch_read:
            self._branch_read = True
            parent = self.work.parent
            if parent is not None:
                found = await (
                    self._parent_tokens
                    if self._parent_tokens is not None
                    else stored_tokens(self.services, self.work.tenant_id, parent)
                )
                if isinstance(found, TokenArtifact):
                    self._branch = found.prompt + found.output
        return self._branch

    def _presumed(self, previous: Served | None) -> int:
        """What the replica that served the previous round is presumed to hold while its
        KV events about that round have not arrived (for ``placement_event_lag_seconds``
        at most): that round's prompt + output."""
        book = self.book
        if previous is None or book is None or previous.tokens is None:
            return 0
        if book.now() - previous.finished_at > self.services.settings.placement_event_lag_seconds:
            return 0
        residency = self.services.residency
        if residency is not None and previous.replica in residency.replica_names:
            applied = residency.last_applied(previous.replica)
            if applied is not None and applied >= previous.finished_at:
                return 0  # its events since say what it holds
        if previous.replica in book.ejected():
            return 0
        # In full blocks, as the events would say it (when the replica said its size).
        size = self._block_sizes.get(previous.replica)
        return previous.tokens // size * size if size else previous.tokens

    def _chosen(self, book: PlacementBook, decision: Decision, counted: bool = True) -> Target:
        work = self.work
        book.record(
            Placement(
                session_id=work.session_id,
                response_id=work.shown_id,
                round=self.rounds if counted else self.rounds - 1,
                purpose=work.purpose,
                at=book.now(),
                decision=decision,
            )
        )
        if counted:
            self.rounds += 1
        tracing.record_placement(
            tracing.current(),
            replica=decision.replica,
            reason=decision.reason,
            resident=dict(decision.resident),
        )
        return Target(self.services.replicas[decision.replica], decision)


async def placed_call(
    services: Runtime,
    work: Work,
    send: Callable[[UpstreamClient], Awaitable[T]],
    tokens: Callable[[T], RoundSize | None],
) -> T:
    """One JSON round outside a running turn (a prewarm, ``/v1/responses/compact``, a
    Messages call): placed like a turn's round, failed over once when refused, its answer
    returned (``tokens``: its prompt + output, as the answer says)."""
    return await RoundPlacer(services, work).call(send, tokens)


@asynccontextmanager
async def placed_stream(
    services: Runtime, work: Work, open_stream: Callable[[UpstreamClient], AsyncContextManager[S]]
) -> AsyncIterator[tuple[S, RoundPlacer, Target]]:
    """A streamed round outside a running turn (a Messages stream): opened on its placed
    replica, or once more on the next-best when refused before it opened."""
    placer = RoundPlacer(services, work)
    target = await placer.target()
    async with AsyncExitStack() as stack:
        while True:
            try:
                stream = await stack.enter_async_context(open_stream(target.client))
                break
            except ApiError as exc:
                retry = placer.after_refusal(target, exc)
                if retry is None:
                    raise
                target = retry
        yield stream, placer, target


def answered_tokens(final: Mapping[str, Any] | None) -> RoundSize | None:
    """A round's prompt + output tokens and its cached prompt tokens, as its answer's
    usage says (None: it does not say the first)."""
    usage = None if final is None else final.get("usage")
    if not isinstance(usage, Mapping):
        return None
    prompt, output = usage.get("input_tokens"), usage.get("output_tokens")
    if type(prompt) is not int or type(output) is not int:
        return None
    details = usage.get("input_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    return RoundSize(prompt + output, cached if type(cached) is int else None)
