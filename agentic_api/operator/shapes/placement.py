"""How the admin views show a round's placement (``cache/placement.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class AdminPlacementCandidate(BaseModel):
    replica: str
    resident_tokens: int = Field(
        description="Leading tokens of the round's prompt (the branch's prefix) the replica "
        "held, as its KV events said (or, until they arrived, presumed from the round it "
        "had just served)."
    )


class AdminPlacement(BaseModel):
    object: Literal["admin.placement"] = "admin.placement"
    at: float = Field(description="When the round was placed (Unix seconds).")
    round: int = Field(description="The turn's round: 0 first, the tool loop's later ones up.")
    purpose: Literal["turn", "compaction", "prewarm", "compact", "input_tokens", "messages"] = (
        Field(
            description="What the round was: a turn's round, a compacting turn's summary, a "
            "prewarm (a client's, or keep-warm's re-warm, shown with the turn it warms), "
            "/v1/responses/compact, /v1/responses/input_tokens, an Anthropic Messages call."
        )
    )
    replica: str = Field(description="The named replica it was sent to.")
    reason: Literal["resident_prefix", "home", "capacity", "spill_load", "failover"] = Field(
        description="resident_prefix: it held the longest leading prefix; home: nothing "
        "resident, so the replica that served the previous round, else the session's home; "
        "capacity: the previous replica had no KV room for the session (its size minus the "
        "other sessions' claims), so it moved to the one with the most room; spill_load: the "
        "first choice was saturated (its /metrics); failover: the first choice failed before "
        "any byte reached the client."
    )
    home: str = Field(
        description="The session's home: among the healthy replicas holding the longest "
        "prefix, the one with the most KV room, the session's rendezvous hash breaking ties."
    )
    candidates: list[AdminPlacementCandidate]
