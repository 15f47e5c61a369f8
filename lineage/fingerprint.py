"""A compact record of the execution config a response was generated under.

Anything here that changes between two turns changes what the model sees in
front of the history (or which cache it may use), so the prefix cache is
lost. Keeping the fingerprint per response lets us say, in plain words, why
a continuation missed the cache. Bulky values are kept as digests; tool
names are kept in the clear so a diff can name what was added or removed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

from lineage.canonical import canonical_json, sha256_hex

__all__ = ["ExecutionFingerprint", "FingerprintChange"]

_DEFAULT_TRUNCATION = "disabled"
# What a request without ``reasoning.context`` (or with ``auto``) gets: every reasoning item.
DEFAULT_REASONING_CONTEXT = "all_turns"


@dataclass(frozen=True)
class FingerprintChange:
    component: str
    description: str


@dataclass(frozen=True)
class ExecutionFingerprint:
    model: str
    instructions: str
    tools: str
    tool_names: tuple[str, ...]
    tool_choice: str
    parallel_tool_calls: bool | None
    text: str
    reasoning: str
    truncation: str
    salt_epoch: int
    # What turns text into the model's tokens, as far as the upstream exposes it (a digest
    # of its tokenizer and chat template, or the model's root path); "" when unknown.
    # A change here means earlier token ids may no longer be the ones the engine would make.
    tokenizer: str = ""
    # The effective ``reasoning.context`` when it is not the default (all_turns): which
    # earlier reasoning items the prompt holds. "" for the default, so fingerprints made
    # before it existed keep their digest. Kept apart from ``reasoning`` (a digest of the
    # rest) so that a diff names it.
    reasoning_context: str = ""

    @classmethod
    def build(
        cls,
        *,
        model: str,
        instructions: object,
        tools: Sequence[Mapping[str, object]] | None,
        tool_choice: object,
        parallel_tool_calls: bool | None,
        text: object,
        reasoning: object,
        truncation: str | None,
        salt_epoch: int,
        tokenizer: str = "",
        reasoning_context: str = "",
    ) -> ExecutionFingerprint:
        """Fingerprint a request's config; values must be plain JSON (see ``canonical_json``).

        An absent value and an empty tool list both digest to ``""``, and an
        absent truncation is recorded as OpenAI's default, ``"disabled"``.
        """
        if salt_epoch < 0:
            raise ValueError(f"salt epoch must not be negative, not {salt_epoch}")
        tool_list = [dict(tool) for tool in tools or ()]
        return cls(
            model=model,
            instructions=_value_digest(instructions),
            tools=_value_digest(tool_list or None),
            tool_names=tuple(_tool_label(tool) for tool in tool_list),
            tool_choice=_value_digest(tool_choice),
            parallel_tool_calls=parallel_tool_calls,
            text=_value_digest(text),
            reasoning=_value_digest(reasoning),
            truncation=_DEFAULT_TRUNCATION if truncation is None else truncation,
            salt_epoch=salt_epoch,
            tokenizer=tokenizer,
            reasoning_context=(
                "" if reasoning_context == DEFAULT_REASONING_CONTEXT else reasoning_context
            ),
        )

    @property
    def digest(self) -> str:
        return sha256_hex(canonical_json(self.to_dict()))

    def to_dict(self) -> dict[str, object]:
        """The fields as plain JSON; an unknown ``tokenizer`` is left out, so fingerprints
        made before it existed (or against upstreams that expose none) keep their digest."""
        data: dict[str, object] = {
            "model": self.model,
            "instructions": self.instructions,
            "tools": self.tools,
            "tool_names": list(self.tool_names),
            "tool_choice": self.tool_choice,
            "parallel_tool_calls": self.parallel_tool_calls,
            "text": self.text,
            "reasoning": self.reasoning,
            "truncation": self.truncation,
            "salt_epoch": self.salt_epoch,
        }
        if self.tokenizer:
            data["tokenizer"] = self.tokenizer
        if self.reasoning_context:
            data["reasoning_context"] = self.reasoning_context
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> ExecutionFingerprint:
        """Rebuild a fingerprint from ``to_dict`` output; anything else is a ``ValueError``."""
        expected = {field.name for field in fields(cls)}
        optional = {"tokenizer", "reasoning_context"}
        if not expected - optional <= set(data) <= expected:
            missing = sorted(expected - optional - set(data))
            unknown = sorted(set(data) - expected)
            raise ValueError(f"bad fingerprint keys: missing {missing}, unknown {unknown}")
        tool_names = data["tool_names"]
        if not isinstance(tool_names, list | tuple) or not all(
            isinstance(name, str) for name in tool_names
        ):
            raise ValueError("fingerprint tool_names must be a list of strings")
        parallel = data["parallel_tool_calls"]
        if parallel is not None and not isinstance(parallel, bool):
            raise ValueError("fingerprint parallel_tool_calls must be a boolean or null")
        epoch = data["salt_epoch"]
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise ValueError("fingerprint salt_epoch must be a non-negative integer")
        return cls(
            model=_text_field(data, "model"),
            instructions=_text_field(data, "instructions"),
            tools=_text_field(data, "tools"),
            tool_names=tuple(tool_names),
            tool_choice=_text_field(data, "tool_choice"),
            parallel_tool_calls=parallel,
            text=_text_field(data, "text"),
            reasoning=_text_field(data, "reasoning"),
            truncation=_text_field(data, "truncation"),
            salt_epoch=epoch,
            tokenizer=_text_field(data, "tokenizer") if "tokenizer" in data else "",
            reasoning_context=(
                _text_field(data, "reasoning_context") if "reasoning_context" in data else ""
            ),
        )

    @property
    def context_mode(self) -> str:
        """The effective ``reasoning.context`` this fingerprint was made under."""
        return self.reasoning_context or DEFAULT_REASONING_CONTEXT

    def diff(self, previous: ExecutionFingerprint) -> list[FingerprintChange]:
        """What changed from ``previous`` to this fingerprint, in field order."""
        changes: list[FingerprintChange] = []

        def note(component: str, description: str) -> None:
            changes.append(FingerprintChange(component, description))

        if self.model != previous.model:
            note("model", f"model changed from {previous.model!r} to {self.model!r}")
        if self.instructions != previous.instructions:
            note(
                "instructions",
                _presence_change("instructions", previous.instructions, self.instructions),
            )
        if self.tools != previous.tools or self.tool_names != previous.tool_names:
            note("tools", _tools_change(previous.tool_names, self.tool_names))
        if self.tool_choice != previous.tool_choice:
            note(
                "tool_choice",
                _presence_change("tool_choice", previous.tool_choice, self.tool_choice),
            )
        if self.parallel_tool_calls != previous.parallel_tool_calls:
            note(
                "parallel_tool_calls",
                f"parallel_tool_calls changed from {previous.parallel_tool_calls}"
                f" to {self.parallel_tool_calls}",
            )
        if self.text != previous.text:
            note("text", _presence_change("text config", previous.text, self.text))
        if self.reasoning != previous.reasoning:
            note(
                "reasoning",
                _presence_change("reasoning config", previous.reasoning, self.reasoning),
            )
        if self.reasoning_context != previous.reasoning_context:
            note(
                "reasoning_context",
                f"reasoning context changed from {previous.context_mode!r}"
                f" to {self.context_mode!r}",
            )
        if self.truncation != previous.truncation:
            note(
                "truncation",
                f"truncation changed from {previous.truncation!r} to {self.truncation!r}",
            )
        if self.salt_epoch != previous.salt_epoch:
            note(
                "salt_epoch",
                f"cache salt epoch changed from {previous.salt_epoch} to {self.salt_epoch}"
                " (tenant salt rotated)",
            )
        if self.tokenizer != previous.tokenizer and self.tokenizer and previous.tokenizer:
            # Only a change between two known identities: "unknown" on one side says
            # nothing about the engine's tokens.
            note("tokenizer", "the upstream's tokenizer or chat template changed")
        return changes


def _value_digest(value: object) -> str:
    return "" if value is None else sha256_hex(canonical_json(value))


def _tool_label(tool: Mapping[str, object]) -> str:
    # Function, custom and namespace tools carry a name; MCP tools are told
    # apart by server label; built-in tools (web_search, ...) only by type.
    for key in ("name", "server_label", "type"):
        label = tool.get(key)
        if isinstance(label, str) and label:
            return label
    return "<unnamed>"


def _text_field(data: Mapping[str, object], key: str) -> str:
    value = data[key]
    if not isinstance(value, str):
        raise ValueError(f"fingerprint {key} must be a string")
    return value


def _presence_change(what: str, before: str, after: str) -> str:
    if not before:
        return f"{what} added"
    if not after:
        return f"{what} removed"
    return f"{what} changed"


def _tools_change(before: Sequence[str], after: Sequence[str]) -> str:
    added = list((Counter(after) - Counter(before)).elements())
    removed = list((Counter(before) - Counter(after)).elements())
    parts = [f"added {_quoted(added)}"] if added else []
    if removed:
        parts.append(f"removed {_quoted(removed)}")
    if parts:
        return "tools changed: " + "; ".join(parts)
    if list(before) != list(after):
        return "tools reordered"
    return "tools changed (same names, different definitions)"


def _quoted(names: Sequence[str]) -> str:
    return ", ".join(repr(name) for name in names)
