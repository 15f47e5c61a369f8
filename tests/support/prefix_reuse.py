"""What the simulator's prefix cache can reuse between two recorded requests: the full
blocks of the token prefix the later prompt shares with the earlier *prompt* (vLLM's
rule, capped one token short of the later prompt). The cache also holds the earlier
request's generated tokens, so this is exact when the later prompt diverges inside the
earlier prompt, and a lower bound when it replays the earlier answer too."""

from __future__ import annotations

from tests.upstream_sim import RecordedRequest, tokenize


def shared_prefix_tokens(earlier: RecordedRequest, later: RecordedRequest) -> int:
    assert earlier.prompt_text is not None and later.prompt_text is not None
    first, second = tokenize(earlier.prompt_text), tokenize(later.prompt_text)
    shared = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        shared += 1
    return shared


def reusable_tokens(earlier: RecordedRequest, later: RecordedRequest, block_size: int) -> int:
    assert later.prompt_tokens is not None
    shared = min(shared_prefix_tokens(earlier, later), later.prompt_tokens - 1)
    return shared // block_size * block_size
