"""The upstream request of a prewarm (``prompt_cache_options.prewarm``): the turn's own
request, changed only where the prompt does not depend on it.

vLLM caches a request's prompt blocks when it prefills them, whatever it then generates,
and its prompt depends on the model, instructions, tools and input alone. So a prewarm
sends the same body a real turn would (the same rendered items, ``cache_salt``, session
fields and router hints, under the same headers: the router places it where the real turn
will go), asking for the fewest output tokens vLLM accepts (``max_tokens`` must be at
least 1) in one JSON answer, since nobody reads its events.
"""

from __future__ import annotations

from typing import Any

# The least vLLM's sampling parameters accept; the one token is discarded.
PREWARM_OUTPUT_TOKENS = 1


def for_prewarm(fields: dict[str, Any]) -> None:
    """Turns a turn's upstream fields into its prewarm's."""
    fields["max_output_tokens"] = PREWARM_OUTPUT_TOKENS
    fields["stream"] = False
