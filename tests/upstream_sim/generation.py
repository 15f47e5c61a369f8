"""Turn a scripted reply into "generated tokens", honouring the output token limit.

The generated token sequence is the tokenized assistant body (see ``render``) followed
by ``<|im_end|>``: exactly what the next turn's prompt contains when the client replays
the output verbatim. When the limit cuts generation short, the cut falls on a token,
and the produced parts are recovered from character offsets (tokens are substrings,
so that is exact): a part cut inside its content keeps the generated prefix of its
text; a function call cut anywhere is dropped, as its JSON would be unparseable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import tokenizer
from .behaviors import Call, Content, Reply, ToolCalls
from .render import PART_SEPARATOR, AssistantPart, Rendered, render_assistant_body
from .state import SimConfig


@dataclass(frozen=True)
class GenPart:
    part: AssistantPart
    call: Call | None = None


@dataclass(frozen=True)
class Generation:
    parts: tuple[GenPart, ...]
    pieces: tuple[str, ...]  # generated token pieces, incl. <|im_end|> when finished
    truncated: bool
    reasoning_tokens: int

    @property
    def output_tokens(self) -> int:
        return len(self.pieces)

    @property
    def token_ids(self) -> list[int]:
        return tokenizer.ids(self.pieces)


def default_reply(rendered: Rendered, config: SimConfig) -> Reply:
    pieces = tokenizer.split(config.echo_prefix + rendered.last_user_text)
    if config.default_reply_tokens is None:
        return Reply(tokenizer.detokenize(pieces[: config.echo_max_tokens]))
    wanted = config.default_reply_tokens
    filler = 0
    while len(pieces) < wanted:
        filler += 1
        pieces.extend([" ", f"w{filler}"])
    return Reply(tokenizer.detokenize(pieces[:wanted]))


def forced_call(body: dict[str, Any]) -> ToolCalls | None:
    """With ``tool_choice`` "required" or a named function, vLLM constrains decoding to a
    call of that tool (of the first function tool for "required"), whatever the model
    would have said: so does the unscripted simulator."""
    choice = body.get("tool_choice")
    names = [
        tool.get("name")
        for tool in body.get("tools") or []
        if isinstance(tool, dict) and tool.get("type") == "function"
    ]
    if choice == "required" and names and isinstance(names[0], str):
        return ToolCalls([Call(names[0])])
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = choice.get("name")
        if isinstance(name, str) and name in names:
            return ToolCalls([Call(name)])
    return None


def planned_parts(content: Content) -> list[GenPart]:
    parts: list[GenPart] = []
    if content.reasoning is not None:
        parts.append(GenPart(AssistantPart("reasoning", content.reasoning)))
    if isinstance(content, Reply):
        parts.append(GenPart(AssistantPart("text", content.text)))
        return parts
    if content.text is not None:
        parts.append(GenPart(AssistantPart("text", content.text)))
    for call in content.calls:
        parts.append(GenPart(AssistantPart("call", call.arguments, name=call.name), call))
    return parts


def generate(content: Content, max_tokens: int) -> Generation:
    parts = planned_parts(content)
    body = render_assistant_body([p.part for p in parts])
    pieces = tokenizer.split(body)
    if isinstance(content, Reply) and content.newline_pairs_as_one:
        pieces = tokenizer.merge_newline_pairs(pieces)
    if len(pieces) + 1 <= max_tokens:
        reasoning = sum(
            tokenizer.count(p.part.render()) for p in parts if p.part.kind == "reasoning"
        )
        return Generation(tuple(parts), (*pieces, tokenizer.IM_END), False, reasoning)

    kept_pieces = pieces[: max(max_tokens, 0)]
    limit = len(tokenizer.detokenize(kept_pieces))
    kept: list[GenPart] = []
    reasoning_end = 0
    offset = 0
    for gp in parts:
        part = gp.part
        content_start = offset + len(part.prefix())
        end = content_start + len(part.content) + len(part.suffix())
        if limit >= end:
            kept.append(gp)
        elif part.kind != "call" and limit > content_start:
            cut = part.content[: limit - content_start]
            kept.append(GenPart(AssistantPart(part.kind, cut, part.name), gp.call))
        if part.kind == "reasoning":
            reasoning_end = min(end, limit)
        if limit < end:
            break
        offset = end + len(PART_SEPARATOR)
    reasoning = tokenizer.count(body[:reasoning_end]) if reasoning_end else 0
    return Generation(tuple(kept), tuple(kept_pieces), True, reasoning)
