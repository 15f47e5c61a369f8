"""Render Responses input items and chat messages into one ChatML-like prompt text.

vLLM renders both APIs through the model's chat template; this module plays that
template. What matters for the project's tests is not fidelity to any real model but
that the rendering is *sensitive* the way a real template is: every byte of every
replayed item reaches the prompt (so a re-rendered tool call or a dropped reasoning
item changes the tokens), while ids that real templates ignore (item ids, call ids)
do not.

Template::

    <|im_start|>system\\n{instructions}\\n\\n{tools block}<|im_end|>\\n   (if either)
    <|im_start|>{role}\\n{content}<|im_end|>\\n                    (one per turn)
    <|im_start|>assistant\\n                                      (generation prompt)

where the tools block is ``# Tools\\n\\n<tools>\\n{one JSON per tool, by line}\\n</tools>``.

An assistant turn is the newline-joined list of its parts, in order:
reasoning ``<think>\\n{text}\\n</think>``, text ``{text}``, and function calls
``<tool_call>\\n{"name": "{name}", "arguments": {arguments}}\\n</tool_call>``
(``arguments`` inserted verbatim). Consecutive assistant-side Responses items
(reasoning, function_call, assistant messages) form one assistant turn, which is what
the simulator generates in one go, so a verbatim replay reproduces the generated
tokens exactly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from .tokenizer import IM_END, IM_START

PartKind = Literal["reasoning", "text", "call"]


@dataclass(frozen=True)
class AssistantPart:
    """One piece of an assistant turn, as generated or as replayed."""

    kind: PartKind
    content: str
    name: str = ""

    def prefix(self) -> str:
        if self.kind == "reasoning":
            return "<think>\n"
        if self.kind == "call":
            return '<tool_call>\n{"name": ' + json.dumps(self.name) + ', "arguments": '
        return ""

    def suffix(self) -> str:
        if self.kind == "reasoning":
            return "\n</think>"
        if self.kind == "call":
            return "}\n</tool_call>"
        return ""

    def render(self) -> str:
        return self.prefix() + self.content + self.suffix()


PART_SEPARATOR = "\n"


def render_assistant_body(parts: Sequence[AssistantPart]) -> str:
    return PART_SEPARATOR.join(p.render() for p in parts)


@dataclass(frozen=True)
class Turn:
    role: str
    content: str


@dataclass(frozen=True)
class Rendered:
    """The prompt text plus the facts the default reply is derived from."""

    text: str
    last_user_text: str


def _dumps(value: Any) -> str:
    # orjson keeps the key order the client sent, as HF's ``tojson`` does: a client
    # that reorders keys between turns changes the prompt, as it would upstream.
    return orjson.dumps(value).decode()


def content_text(content: Any) -> str:
    """Flatten message content (a string or a list of content parts) to text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping):
                ptype = part.get("type")
                if ptype in ("input_text", "output_text", "text", "reasoning_text", "summary_text"):
                    texts.append(str(part.get("text", "")))
                elif ptype == "refusal":
                    texts.append(str(part.get("refusal", "")))
                else:
                    texts.append(_dumps(part))
            else:
                texts.append(_dumps(part))
        return "\n".join(texts)
    return _dumps(content)


def _tools_block(tools: Sequence[Any]) -> str:
    lines = "\n".join(_dumps(tool) for tool in tools)
    return f"# Tools\n\n<tools>\n{lines}\n</tools>"


def _with_tools(turns: list[Turn], tools: Sequence[Any] | None) -> list[Turn]:
    if not tools:
        return turns
    block = _tools_block(tools)
    if turns and turns[0].role == "system":
        head = turns[0]
        merged = f"{head.content}\n\n{block}" if head.content else block
        return [Turn("system", merged), *turns[1:]]
    return [Turn("system", block), *turns]


def render_turns(turns: Iterable[Turn], *, add_generation_prompt: bool = True) -> str:
    out = [f"{IM_START}{t.role}\n{t.content}{IM_END}\n" for t in turns]
    if add_generation_prompt:
        out.append(f"{IM_START}assistant\n")
    return "".join(out)


def _last_user_text(turns: Sequence[Turn]) -> str:
    for turn in reversed(turns):
        if turn.role in ("user", "tool"):
            return turn.content
    return ""


# --- Responses API -------------------------------------------------------------------


def _reasoning_text(item: Mapping[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, list) and content:
        return content_text(content)
    summary = item.get("summary")
    if isinstance(summary, list):
        return content_text(summary)
    return ""


def _assistant_part_of_item(
    item: Mapping[str, Any], drop_tool_calls: bool = False
) -> AssistantPart | None:
    itype = item.get("type")
    if itype == "reasoning":
        return AssistantPart("reasoning", _reasoning_text(item))
    if itype == "function_call" and drop_tool_calls:
        # A template that renders only ``content``: the call leaves an empty message.
        return AssistantPart("text", "")
    if itype == "function_call":
        args = item.get("arguments", "")
        return AssistantPart(
            "call",
            args if isinstance(args, str) else _dumps(args),
            name=str(item.get("name", "")),
        )
    if (itype == "message" or itype is None) and item.get("role") == "assistant":
        return AssistantPart("text", content_text(item.get("content")))
    return None


def _turn_of_item(item: Any) -> Turn:
    if not isinstance(item, Mapping):
        return Turn("user", content_text(item))
    itype = item.get("type")
    if itype in ("message", None) and isinstance(item.get("role"), str):
        return Turn(str(item["role"]), content_text(item.get("content")))
    if itype == "function_call_output":
        output = item.get("output")
        return Turn("tool", output if isinstance(output, str) else content_text(output))
    # Item types the template does not know (web_search_call, custom tool calls, …)
    # still reach the model: render the item's JSON so that changing it matters.
    return Turn(str(itype), _dumps(item))


def responses_turns(body: Mapping[str, Any], drop_tool_calls: bool = False) -> list[Turn]:
    turns: list[Turn] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        turns.append(Turn("system", instructions))
    request_input = body.get("input")
    if isinstance(request_input, str):
        turns.append(Turn("user", request_input))
    elif isinstance(request_input, list):
        pending: list[AssistantPart] = []
        for item in request_input:
            part = (
                _assistant_part_of_item(item, drop_tool_calls)
                if isinstance(item, Mapping)
                else None
            )
            if part is not None:
                pending.append(part)
                continue
            if pending:
                turns.append(Turn("assistant", render_assistant_body(pending)))
                pending = []
            turns.append(_turn_of_item(item))
        if pending:
            turns.append(Turn("assistant", render_assistant_body(pending)))
    tools = body.get("tools")
    return _with_tools(turns, tools if isinstance(tools, list) else None)


def render_responses(body: Mapping[str, Any], *, drop_tool_calls: bool = False) -> Rendered:
    turns = responses_turns(body, drop_tool_calls)
    return Rendered(render_turns(turns), _last_user_text(turns))


# --- Chat Completions ----------------------------------------------------------------


def _chat_assistant_parts(message: Mapping[str, Any]) -> list[AssistantPart]:
    parts: list[AssistantPart] = []
    reasoning = message.get("reasoning")
    if reasoning is None:
        reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        parts.append(AssistantPart("reasoning", reasoning))
    text = content_text(message.get("content"))
    if text:
        parts.append(AssistantPart("text", text))
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, list):
        for call in tool_calls:
            function = call.get("function", {}) if isinstance(call, Mapping) else {}
            args = function.get("arguments", "")
            parts.append(
                AssistantPart(
                    "call",
                    args if isinstance(args, str) else _dumps(args),
                    name=str(function.get("name", "")),
                )
            )
    return parts


def chat_turns(messages: Sequence[Any], tools: Sequence[Any] | None) -> list[Turn]:
    turns: list[Turn] = []
    for message in messages:
        if not isinstance(message, Mapping):
            turns.append(Turn("user", content_text(message)))
            continue
        role = str(message.get("role", "user"))
        if role == "assistant":
            turns.append(Turn("assistant", render_assistant_body(_chat_assistant_parts(message))))
        else:
            turns.append(Turn(role, content_text(message.get("content"))))
    return _with_tools(turns, tools)


def render_chat(
    messages: Sequence[Any],
    tools: Sequence[Any] | None = None,
    *,
    add_generation_prompt: bool = True,
) -> Rendered:
    turns = chat_turns(messages, tools)
    return Rendered(
        render_turns(turns, add_generation_prompt=add_generation_prompt),
        _last_user_text(turns),
    )
