"""Compaction: the model summarizes a history into one ``compaction`` item.

Two ways in, one request upstream (``turns/prepare/summary_request.py``: the history as the
continuation would send it, then a question asking for the summary):

- inline: a ``compaction_trigger`` as the last input item of ``POST /v1/responses``
  (HTTP JSON, SSE, WebSocket, background), which is what Codex sends when its context
  fills up. The turn's output is the one ``compaction`` item; its stream is
  ``response.created``, ``response.in_progress``, ``response.output_item.added``,
  ``response.compaction.compacting`` (as summary tokens arrive; no content),
  ``response.output_item.done`` and ``response.completed``. It is stored (or kept by
  the WebSocket connection) like any turn: its input, trigger included, and the item.
- ``POST /v1/responses/compact``: stores nothing and answers the compacted window
  itself, ``{object: "response.compaction", output: [user messages…, compaction]}``
  (``turns/without_commit/compact.py``).

The item carries the model's summary verbatim in ``encrypted_content`` (the field
clients replay untouched; ours is not encrypted, only opaque to clients). When a later
request carries it, ``turns/prepare/render.py`` shows it to the model as a fixed message holding
that summary (``wire/summary.py``), the same bytes every turn, so the compacted window
that follows is a stable prefix: its first turn reuses what it shares with the summary
request (instructions, tools, the leading messages), every later one the whole window
through the summary.
"""

from __future__ import annotations

from typing import Any

from agentic_api.errors import ApiError, UpstreamError
from agentic_api.log import get_logger
from agentic_api.turns.prepare.summary_request import summary_text
from agentic_api.turns.runner.finish import Completion, Ending
from agentic_api.turns.runner.in_progress import TurnInProgress
from agentic_api.turns.runner.round import upstream_round
from agentic_api.wire.items import to_item
from agentic_api.wire.response_object import normalize_usage
from lineage import IdKind, mint_id

log = get_logger("agentic_api.turns.compaction")

CREATED_BY = "agentic-api"


def compaction_item(item_id: str, summary: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "compaction",
        "encrypted_content": summary,
        "created_by": CREATED_BY,
    }


class _Progress:
    """The client's view of the summary being written: the item, announced once and
    with no content; a ``response.compaction.compacting`` event per upstream delta
    (the summary itself stays hidden until it is whole); the item done."""

    def __init__(self, run: TurnInProgress) -> None:
        self.run = run
        self.relay = run.relay
        self.emit = run.emit
        self.item_id = mint_id(IdKind.COMPACTION)
        self.output_index = 0
        self.announced = False

    def announce(self) -> None:
        if not self.announced:
            self.announced = True
            self.emit(
                self.relay.stamp(
                    {
                        "type": "response.output_item.added",
                        "output_index": self.output_index,
                        "item": compaction_item(self.item_id, ""),
                    }
                )
            )

    def upstream_event(self, event: dict[str, Any]) -> None:
        if not self.relay.opened:
            # Opened from no snapshot: a compacting turn's streamed objects keep the
            # request's own sampling fields.
            self.run.show_start({})
        # The relay keeps the upstream's terminal object or error; its own version of
        # each event is not for the client, whose output is the compaction item only.
        self.relay.translate(event, stamp=False)
        kind = event.get("type")
        if isinstance(kind, str) and kind.endswith(".delta"):
            self.announce()
            self.emit(
                self.relay.stamp(
                    {
                        "type": "response.compaction.compacting",
                        "item_id": self.item_id,
                        "output_index": self.output_index,
                    }
                )
            )

    def done(self, item: dict[str, Any]) -> None:
        self.announce()
        self.emit(
            self.relay.stamp(
                {
                    "type": "response.output_item.done",
                    "output_index": self.output_index,
                    "item": item,
                }
            )
        )


async def run_compaction_turn(run: TurnInProgress) -> Ending:
    """A turn asked with a ``compaction_trigger``: one summary request upstream, then the
    turn completes with the ``compaction`` item as its output (what the client sees,
    what is stored and what a continuation replays)."""
    summarized = await summarize(run, run.turn.body)
    if isinstance(summarized, ApiError):
        return summarized
    item, upstream = summarized
    return Completion(
        status="completed",
        output=[item],
        model_output=[to_item(item)],
        usage=normalize_usage(upstream.get("usage")),
        upstream=upstream,
        incomplete_details=None,
    )


async def summarize(
    run: TurnInProgress, body: bytes
) -> tuple[dict[str, Any], dict[str, Any]] | ApiError:
    """The summary round of a compacting turn, shown to the client as output item 0:
    the ``compaction`` item and the upstream's final object, or the failure to store."""
    turn = run.turn
    progress = _Progress(run)
    # The client sees the item announced as soon as the response opens.
    run.after_opening = progress.announce
    failure = await upstream_round(run, body, progress.upstream_event)
    if failure is not None:
        return failure
    upstream = run.relay.upstream_final or {}
    summary = summary_text(upstream)
    if not summary:
        return UpstreamError("The model returned no summary to compact the history with.")
    if upstream.get("status") == "incomplete":
        # The summary was cut at its output limit; it is still the summary the model
        # wrote, and the compaction it asked for is done.
        log.warning("compaction summary cut at the output limit", response_id=turn.response_id)
    item = compaction_item(progress.item_id, summary)
    progress.done(item)
    return item, upstream
