"""A turn under way: what every part of running it shares, in one object, and
everything written while it runs (the prepared turn itself never changes).

``turns/run.py`` builds it; the plain turn, the tool loop and compaction run their
upstream rounds through it (``turns/runner/round.py``) and it ends through
``turns/runner/finish.py``. It holds the token plan, the commit's hooks, what the model
saw (set when the turn completes), what the turn holds open until it has ended, and the
two facts the failure rule reads: whether the client's stream has started, and whether
the turn has done anything (an answered round, a tool run). Until one of them is true,
an upstream refusal is the request's plain error and nothing is stored; after, every
failure is stored.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, AsyncExitStack, nullcontext
from typing import Any

import orjson

from agentic_api.metrics import TurnMeter
from agentic_api.runtime import Runtime
from agentic_api.turns.data.commit_steps import NO_HOOKS, CommitHooks
from agentic_api.turns.data.prepared import PreparedTurn
from agentic_api.turns.data.token_plan import TokenPlan
from agentic_api.turns.prepare.render import streams_upstream
from agentic_api.turns.runner.channel import TurnChannel
from agentic_api.turns.runner.injections import Injections
from agentic_api.turns.runner.placing import RoundPlacer
from agentic_api.turns.runner.relay import TEXT_DELTA, StreamRelay
from agentic_api.wire.items import Item
from agentic_api.wire.reasoning_seal import wants_sealed_reasoning
from agentic_api.wire.response_object import open_sampling

Emit = Callable[[dict[str, Any]], None]
# Emits a text delta given as its JSON and sequence number (spliced by the relay,
# ``turns/runner/delta_splice.py``).
EmitJson = Callable[[bytes, int], None]


class TurnInProgress:
    def __init__(
        self,
        services: Runtime,
        turn: PreparedTurn,
        channel: TurnChannel | None,
        *,
        hooks: CommitHooks = NO_HOOKS,
        tokens: TokenPlan | None = None,
        injections: Injections | None = None,
    ) -> None:
        self.services = services
        # Where the client's tool outputs arrive while the turn runs (the beta
        # WebSocket's response.inject); None where the client cannot inject.
        self.injections = injections
        self.turn = turn
        self.channel = channel
        # Set by whoever runs the turn: work that commits with it, and where its events
        # are already being stored (turns/data/commit_steps.py).
        self.hooks = hooks
        # What the turn does about its token ids, when the upstream reports them
        # (turns/runner/tokens.py).
        self.tokens = tokens
        # Set when the turn completes: its output as the model saw it (what is stored and
        # replayed), which for a turn that ran tools differs from the client's ``output``.
        self.model_output: list[Item] | None = None
        # What the turn holds open until it has ended (the tool loop's MCP sessions), so
        # that closing them never delays the terminal event.
        self.held = AsyncExitStack()
        self.relay = StreamRelay(
            turn.base,
            open_sampling(turn.request),
            services.sampling_defaults.setdefault(turn.request.model, {}),
            seal_reasoning=wants_sealed_reasoning(turn.request.include),
        )
        self.streaming = streams_upstream(turn.request)
        # Which replica each round goes to (named replicas), and the turn's one failover.
        self.placer = RoundPlacer.for_turn(
            services,
            turn,
            "compaction" if turn.compacts else "turn",
            # The parent's token ids, when the token plan is reading them already.
            parent_tokens=None if tokens is None else tokens.parent,
        )
        self.meter = TurnMeter(
            model=turn.request.model,
            tenant=turn.caller.tenant_id,
            history_items=len(turn.history),
            streaming=channel is not None,
        )
        # The events stored with the turn (when its stream is stored), as published:
        # ``(sequence_number, json)``, the JSON the client got, so the commit stores them
        # as they are.
        self.events: list[tuple[int, bytes]] = []
        self.emit, self.emit_json = _emitters(
            self.meter, self.events if turn.records_events else None, channel
        )
        # The client's stream has started (channel.opened() was sent): it can no longer
        # be answered with a plain HTTP error.
        self.shown = False
        # An upstream round was answered or a tool ran: the turn happened.
        self.worked = False
        # What a kind of turn shows right after the response's opening events (the tool
        # loop's tool listings, compaction's item); None for plain turns.
        self.after_opening: Callable[[], None] | None = None
        self._upstream_over = False

    @property
    def begun(self) -> bool:
        """Whether a failure from now on is stored (rather than raised as a refusal)."""
        return self.shown or self.worked

    def accepted(self) -> None:
        """The upstream took a round (or the turn runs approved tools first): the
        client's stream starts, once."""
        if not self.shown and self.channel is not None:
            self.shown = True
            self.channel.opened()

    def show_start(self, first: dict[str, Any]) -> None:
        """Shows the client the response's opening events, once; ``first`` is the
        upstream's first event (a snapshot says the sampling it applied) or ``{}``."""
        if self.relay.opened:
            return
        self.accepted()
        for event in self.relay.open_with(first):
            self.emit(event)
        if self.after_opening is not None:
            self.after_opening()

    def events_batched(self) -> AbstractContextManager[Callable[[], None] | None]:
        """While a round streams: what the client is sent is flushed with each upstream
        chunk (the flush to call then; None when nobody streams the turn)."""
        if self.channel is None:
            return nullcontext(None)
        return self.channel.batched()

    def show_start_early(self) -> None:
        """The upstream accepted a streamed round: the client's stream opens now, before
        the upstream's first event, when every sampling value it would tell is known
        (the request's, or the model's learned from earlier turns). Else the opening
        waits for that event (``show_start``), once per model and process."""
        relay = self.relay
        if relay.opened or not relay.sampling_known:
            return
        self.accepted()
        for event in relay.open_known():
            self.emit(event)
        if self.after_opening is not None:
            self.after_opening()

    def refused(self, error: BaseException) -> None:
        """The turn ended before the client's stream started: whoever waits for it to
        open gets ``error`` instead."""
        if not self.shown and self.channel is not None:
            self.channel.failed_to_open(error)

    def upstream_over(self) -> None:
        """The model's part is over (the turn completes or fails): timed once."""
        if not self._upstream_over:
            self._upstream_over = True
            self.meter.upstream_done()


def _emitters(
    meter: TurnMeter, stored: list[tuple[int, bytes]] | None, channel: TurnChannel | None
) -> tuple[Emit, EmitJson]:
    """``emit`` takes an event (stamped); ``emit_json`` the JSON of a text delta the relay
    spliced (``turns/runner/delta_splice.py``), after the delta it was learned from, so
    never the first token, and always its type and sequence number, which it is given
    with."""
    # Every event of the turn passes here: a closure over what it needs, no lookups. Its
    # JSON is made once, here (or by the relay), for the client's stream and the stored
    # events alike.
    if stored is None and channel is None:

        def count(event: dict[str, Any]) -> None:
            meter.event(event)

        def count_json(data: bytes, sequence: int) -> None:
            pass

        return count, count_json

    def emit(event: dict[str, Any]) -> None:
        meter.event(event)
        data = orjson.dumps(event)
        sequence: int = event["sequence_number"]
        if stored is not None:
            stored.append((sequence, data))
        if channel is not None:
            channel.publish(event["type"], sequence, data)

    def emit_json(data: bytes, sequence: int) -> None:
        if stored is not None:
            stored.append((sequence, data))
        if channel is not None:
            channel.publish(TEXT_DELTA, sequence, data)

    return emit, emit_json
