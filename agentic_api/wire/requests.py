"""The ``POST /v1/responses`` body: validated strictly where we act on a field, passed
through untouched where we do not (the upstream decides about those)."""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from agentic_api.errors import ApiError, InvalidRequest
from agentic_api.wire.create_fields import (
    PromptCacheOptions,
    check_include,
    check_prewarm,
    check_text_format,
    refuse_unsupported,
)
from agentic_api.wire.limits import (
    MAX_ID_LENGTH,
    MAX_INCLUDE_ENTRIES,
    MAX_INPUT_ITEMS,
    MAX_INTEGER,
    MAX_MODEL_LENGTH,
    MAX_PROMPT_CACHE_KEY_LENGTH,
    MAX_SAFETY_IDENTIFIER_LENGTH,
    MAX_TOOLS,
)
from agentic_api.wire.metadata import check_metadata
from agentic_api.wire.multi_agent import NOT_BETA, BetaContext, MultiAgentConfig, check_multi_agent
from agentic_api.wire.storable import check_depth, check_no_nul, too_deep

# Fields that shape our own behaviour and never travel upstream as given.
SERVER_FIELDS = frozenset(
    {
        "previous_response_id",
        "conversation",
        "store",
        "stream",
        "stream_options",
        "background",
        "background_options",
        # Ours (compaction by threshold), which vLLM does not know.
        "context_management",
        "metadata",
        "cache_salt",
        "generate",
        "stream_id",
        "type",
        # The hosted multi-agent beta runs here (turns/kinds/multi_agent/), never upstream.
        "multi_agent",
    }
)


class ConversationRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=MAX_ID_LENGTH)


# ``background_options.completion_window``: the queue hands out lower ranks first.
COMPLETION_WINDOW_RANKS = {"soonest": 0, "2h": 1, "8h": 2}


class BackgroundOptions(BaseModel):
    """openai 3.57's ``BackgroundOptions``: both keys optional, nothing else."""

    model_config = ConfigDict(extra="forbid")
    completion_window: Literal["soonest", "2h", "8h"] | None = None
    continuation_id: str | None = Field(None, min_length=1, max_length=MAX_ID_LENGTH, strict=True)

    @property
    def window_rank(self) -> int:
        return COMPLETION_WINDOW_RANKS[self.completion_window or "soonest"]

    def echoed(self) -> dict[str, Any]:
        return {
            "completion_window": self.completion_window or "soonest",
            "continuation_id": self.continuation_id,
        }


class CreateResponseRequest(BaseModel):
    """Fields we read. Anything else is kept in ``model_extra`` and passed through verbatim."""

    model_config = ConfigDict(extra="allow")

    # strict: OpenAI refuses "yes" for a boolean and "1" for a number, and so do we
    # (pydantic would coerce them, and "store": "no" would silently mean true).
    model: str = Field(min_length=1, max_length=MAX_MODEL_LENGTH, strict=True)
    input: StrictStr | list[Any]
    instructions: StrictStr | list[Any] | None = None
    previous_response_id: str | None = Field(
        None, min_length=1, max_length=MAX_ID_LENGTH, strict=True
    )
    conversation: str | ConversationRef | None = None
    store: bool = Field(True, strict=True)
    stream: bool = Field(False, strict=True)
    stream_options: dict[str, Any] | None = None
    background: bool = Field(False, strict=True)
    background_options: BackgroundOptions | None = None
    tools: list[dict[str, Any]] | None = Field(None, max_length=MAX_TOOLS)
    tool_choice: StrictStr | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = Field(None, strict=True)
    max_output_tokens: int | None = Field(None, ge=1, le=MAX_INTEGER, strict=True)
    max_tool_calls: int | None = Field(None, ge=1, le=MAX_INTEGER, strict=True)
    temperature: float | None = Field(None, ge=0, le=2, strict=True)
    top_p: float | None = Field(None, ge=0, le=1, strict=True)
    top_logprobs: int | None = Field(None, ge=0, le=20, strict=True)
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    include: list[str] | None = Field(None, max_length=MAX_INCLUDE_ENTRIES)
    metadata: dict[str, Any] | None = None
    prompt_cache_key: str | None = Field(None, max_length=MAX_PROMPT_CACHE_KEY_LENGTH, strict=True)
    # Ours: never sent upstream (vLLM has no such field; its prefix cache is automatic).
    prompt_cache_options: PromptCacheOptions | None = None
    user: str | None = Field(None, strict=True)
    safety_identifier: str | None = Field(
        None, max_length=MAX_SAFETY_IDENTIFIER_LENGTH, strict=True
    )
    service_tier: str | None = Field(None, strict=True)
    # The hosted multi-agent beta (wire/multi_agent.py): only on the beta path.
    multi_agent: MultiAgentConfig | None = None

    @field_validator("model", "previous_response_id")
    @classmethod
    def _storable(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            check_no_nul(value, str(info.field_name))
        return value

    @field_validator("input")
    @classmethod
    def _input_size(cls, value: str | list[Any]) -> str | list[Any]:
        if isinstance(value, list) and len(value) > MAX_INPUT_ITEMS:
            raise ValueError(f"at most {MAX_INPUT_ITEMS} input items are allowed")
        return value

    @field_validator("conversation", mode="before")
    @classmethod
    def _conversation(cls, value: Any) -> Any:
        # Checked up front so either form fails with one plain message, not a union's.
        conversation_id = value.get("id") if isinstance(value, dict) else value
        if value is not None and (
            not isinstance(conversation_id, str)
            or not 0 < len(conversation_id) <= MAX_ID_LENGTH
            or (isinstance(value, dict) and set(value) != {"id"})
        ):
            raise ValueError(
                f'give a conversation id (1 to {MAX_ID_LENGTH} characters) or {{"id": id}}'
            )
        if isinstance(conversation_id, str) and "\x00" in conversation_id:
            raise ValueError("a conversation id must not contain the NUL character (U+0000)")
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        try:
            return check_metadata(value)
        except InvalidRequest as exc:
            raise ValueError(exc.message) from exc

    @field_validator("tools")
    @classmethod
    def _tools(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for index, tool in enumerate(value or []):
            if not isinstance(tool.get("type"), str) or not tool["type"]:
                raise ValueError(f"tools[{index}] needs a string 'type'")
            if tool["type"] == "function" and not isinstance(tool.get("name"), str):
                raise ValueError(f"tools[{index}] is a function tool without a 'name'")
        return value

    @property
    def prewarms(self) -> bool:
        """``prompt_cache_options.prewarm``: warm the prompt's cache, generate and store
        nothing (``turns/prewarm.py``)."""
        return self.prompt_cache_options is not None and self.prompt_cache_options.prewarm

    @property
    def reasoning_context(self) -> str:
        """The effective ``reasoning.context``: which earlier reasoning items are sent back
        to the model (``wire/reasoning_context.py``). ``auto`` and absent are
        ``all_turns``, what this server always sent: every stored item, replayed."""
        asked = (self.reasoning or {}).get("context")
        return DEFAULT_REASONING_CONTEXT if asked in (None, "auto") else str(asked)

    def upstream_reasoning(self) -> dict[str, Any] | None:
        """``reasoning`` as the upstream gets it: without ``context``, which this server
        applies itself (vLLM has no such field), or None when nothing else is left."""
        if self.reasoning is None:
            return None
        rest = {key: value for key, value in self.reasoning.items() if key != "context"}
        return rest or None

    @property
    def runs_agents(self) -> bool:
        """Whether the server runs this response as a multi-agent tree."""
        return self.multi_agent is not None and self.multi_agent.enabled

    @property
    def conversation_id(self) -> str | None:
        if isinstance(self.conversation, ConversationRef):
            return self.conversation.id
        return self.conversation

    def passthrough(self) -> dict[str, Any]:
        """Fields passed through to the upstream as the client sent them."""
        return {k: v for k, v in (self.model_extra or {}).items() if k not in SERVER_FIELDS}


# What ``auto`` (or no ``reasoning.context``) means here.
DEFAULT_REASONING_CONTEXT = "all_turns"


def parse_json_object(raw: bytes) -> dict[str, Any]:
    if not raw.strip():
        raise InvalidRequest("The request body is empty; send a JSON object.", code="empty_body")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):
            # orjson itself stops past 1,024 levels: the same refusal as ours.
            raise too_deep() from exc
        raise InvalidRequest(
            f"The request body is not valid JSON: {exc}", code="invalid_json"
        ) from exc
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    check_depth(data)
    return data


def validation_failure(exc: ValidationError) -> ApiError:
    first = exc.errors()[0]
    location = [str(part) for part in first.get("loc", ())]
    param = location[0] if location else None
    for part in location[1:]:
        param = f"{param}[{part}]" if part.isdigit() else f"{param}.{part}"
    if first.get("type") == "missing":
        return InvalidRequest(
            f"Missing required parameter: '{param}'.",
            param=param,
            code="missing_required_parameter",
        )
    message = first.get("msg", "invalid value")
    # pydantic names type mismatches "bool_type", "int_type", "string_type", ...
    kind = str(first.get("type", ""))
    code = "invalid_type" if kind.endswith("_type") else "invalid_value"
    return InvalidRequest(f"Invalid value for '{param}': {message}", param=param, code=code)


def parse_create_request(
    raw: bytes, beta: BetaContext = NOT_BETA
) -> tuple[CreateResponseRequest, dict[str, Any]]:
    """``beta``: how the request arrived (the beta path and header), which decides
    whether ``multi_agent`` may be given."""
    data = parse_json_object(raw)
    try:
        request = CreateResponseRequest.model_validate(data)
    except ValidationError as exc:
        raise validation_failure(exc) from exc
    refuse_unsupported(data)
    check_multi_agent(request.multi_agent, data, beta)
    check_include(request.include, param="include")
    check_text_format(request.text)
    if request.stream_options is not None and not request.stream:
        # OpenAI's answer too: the options only shape a stream.
        raise InvalidRequest(
            "'stream_options' is only allowed when 'stream' is true.",
            param="stream_options",
            code="invalid_value",
        )
    if request.conversation is not None and request.previous_response_id is not None:
        raise InvalidRequest(
            "'conversation' and 'previous_response_id' cannot be used together.",
            param="previous_response_id",
            code="mutually_exclusive_parameters",
        )
    if request.input == [] and not (
        request.previous_response_id or request.conversation or request.prompt_cache_key
    ):
        # Nothing to answer and nothing to place the turn in a session by.
        raise InvalidRequest(
            "'input' is empty: give at least one item, or continue a previous response or "
            "a conversation.",
            param="input",
            code="empty_input",
        )
    check_prewarm(request.prompt_cache_options, background=request.background)
    if request.background and not request.store:
        raise InvalidRequest(
            "'background' requires 'store' to be true.", param="background", code="invalid_value"
        )
    window = request.background_options.completion_window if request.background_options else None
    if window in ("2h", "8h") and (not request.background or request.stream):
        raise InvalidRequest(
            f"The '{window}' completion window requires 'background': true and 'stream' "
            "false or omitted.",
            param="background_options.completion_window",
            code="invalid_value",
        )
    return request, data
