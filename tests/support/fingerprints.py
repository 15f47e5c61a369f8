"""Fingerprints for rows written straight to a database (not through a turn)."""

from __future__ import annotations

from lineage import ExecutionFingerprint


def bare_fingerprint(model: str) -> ExecutionFingerprint:
    """A turn's fingerprint on ``model`` with nothing else set (no instructions, tools,
    text or reasoning options) and the first salt epoch."""
    return ExecutionFingerprint.build(
        model=model,
        instructions=None,
        tools=None,
        tool_choice=None,
        parallel_tool_calls=None,
        text=None,
        reasoning=None,
        truncation=None,
        salt_epoch=1,
    )
