"""A vLLM-shaped upstream simulator for the project's tests.

It answers ``/v1/responses``, ``/v1/chat/completions``, ``/v1/messages`` (Anthropic's
Messages API, with ``/v1/messages/count_tokens``), ``/v1/models``, ``/health`` and
``/tokenize`` the way vLLM 0.32's OpenAI server does as far as our server can
observe: wire shapes, error bodies, ``cache_salt`` validation, and ``cached_tokens``
from a block-level prefix-cache model over a deterministic toy tokenizer. Tests script
what the "model" does next (``Reply``, ``ToolCalls``, ``Fail``, ``Disconnect``,
``Hang``, ``StreamError``, ``Malformed``) and read back every request exactly as it arrived.

    with SimServer(model="m", block_size=16) as sim:
        sim.push(Reply("hello"))
        ...  # point the server under test at sim.url + "/v1"
        assert sim.last("/v1/responses").json["store"] is False
"""

from .behaviors import (
    Behavior,
    Call,
    Disconnect,
    Fail,
    Hang,
    Malformed,
    Reply,
    StreamError,
    ToolCalls,
    behavior_from_json,
)
from .messages_api import render_messages
from .prefix_cache import PrefixCache
from .render import render_chat, render_responses
from .server import SimServer, create_app
from .state import Headers, RecordedRequest, SimConfig, SimState
from .tokenizer import IM_END, IM_START, split, tokenize

__all__ = [
    "IM_END",
    "IM_START",
    "Behavior",
    "Call",
    "Disconnect",
    "Fail",
    "Hang",
    "Headers",
    "Malformed",
    "PrefixCache",
    "RecordedRequest",
    "Reply",
    "SimConfig",
    "SimServer",
    "SimState",
    "StreamError",
    "ToolCalls",
    "behavior_from_json",
    "create_app",
    "render_chat",
    "render_messages",
    "render_responses",
    "split",
    "tokenize",
]
