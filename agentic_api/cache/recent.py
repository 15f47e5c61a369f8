"""The token ids of turns this process just committed, so accounting their
continuations (usually the very next request of the session) reads nothing.

Bounded by bytes, least recently used first out; tenant-checked on every get.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from dataclasses import dataclass

_OVERHEAD_BYTES = 256


@dataclass(frozen=True)
class TokenArtifact:
    """A stored turn's exact tokens and what they were made under."""

    response_id: str
    tenant_id: str
    fingerprint_digest: str
    prompt: array[int]
    output: array[int]
    # Types of the items the model generated (to name what a template dropped).
    output_types: tuple[str, ...]

    @property
    def size(self) -> int:
        return (len(self.prompt) + len(self.output)) * 4 + _OVERHEAD_BYTES


class RecentArtifacts:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, TokenArtifact] = OrderedDict()
        self._bytes = 0

    def keep(self, artifact: TokenArtifact) -> None:
        if artifact.size > self.max_bytes:
            return
        self.forget(artifact.response_id)
        self._entries[artifact.response_id] = artifact
        self._bytes += artifact.size
        while self._bytes > self.max_bytes:
            _, dropped = self._entries.popitem(last=False)
            self._bytes -= dropped.size

    def get(self, tenant_id: str, response_id: str) -> TokenArtifact | None:
        found = self._entries.get(response_id)
        if found is None or found.tenant_id != tenant_id:
            return None
        self._entries.move_to_end(response_id)
        return found

    def forget(self, response_id: str) -> None:
        dropped = self._entries.pop(response_id, None)
        if dropped is not None:
            self._bytes -= dropped.size

    def __len__(self) -> int:
        return len(self._entries)
