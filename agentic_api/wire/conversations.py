"""The Conversations API's wire shapes: the request bodies we accept and the objects we emit.

Items given to a conversation go through exactly the checks and normalization of a
response's ``input`` (and get ids the same way), so an item added here and an item
sent as turn input are stored, replayed and listed identically.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentic_api.errors import ApiError, InvalidRequest
from agentic_api.wire.items import Item, normalize_input, to_item
from agentic_api.wire.limits import MAX_CONVERSATION_ITEMS_PER_CALL, MAX_SAFETY_IDENTIFIER_LENGTH
from agentic_api.wire.metadata import check_metadata
from agentic_api.wire.requests import parse_json_object, validation_failure
from agentic_api.wire.storable import check_no_nul


class CreateConversationRequest(BaseModel):
    """``POST /v1/conversations``."""

    model_config = ConfigDict(extra="forbid")

    items: list[Any] | None = None
    metadata: dict[str, Any] | None = None
    # openai 3.63: stored with the conversation (a column the operator can query);
    # OpenAI's Conversation object has no such field, so it is not echoed.
    safety_identifier: str | None = Field(
        None, max_length=MAX_SAFETY_IDENTIFIER_LENGTH, strict=True
    )


@dataclass(frozen=True)
class NewConversation:
    """A validated ``POST /v1/conversations``."""

    items: list[Item]
    metadata: dict[str, str]
    safety_identifier: str | None


class UpdateConversationRequest(BaseModel):
    """``POST /v1/conversations/{id}``: replaces the metadata (``null`` clears it)."""

    model_config = ConfigDict(extra="forbid")

    metadata: dict[str, Any] | None


class AddItemsRequest(BaseModel):
    """``POST /v1/conversations/{id}/items``."""

    model_config = ConfigDict(extra="forbid")

    items: list[Any]


class ConversationObject(BaseModel):
    """Documents the Conversation object (the routes emit plain dicts of this shape)."""

    id: str
    object: Literal["conversation"] = "conversation"
    created_at: int
    metadata: dict[str, str]


class ConversationDeleted(BaseModel):
    id: str
    object: Literal["conversation.deleted"] = "conversation.deleted"
    deleted: bool


class ConversationItemList(BaseModel):
    object: Literal["list"] = "list"
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool


_Body = TypeVar("_Body", bound=BaseModel)


def _parse(model: type[_Body], raw: bytes) -> _Body:
    data = parse_json_object(raw)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first.get("type") == "extra_forbidden":
            name = ".".join(str(part) for part in first.get("loc", ()))
            raise InvalidRequest(
                f"Unknown parameter: '{name}'.", param=name, code="unknown_parameter"
            ) from exc
        raise validation_failure(exc) from exc


def parse_create(raw: bytes) -> NewConversation:
    """The validated items (ids assigned, canonically encoded), metadata and safety
    identifier to create."""
    request = _parse(CreateConversationRequest, raw)
    items = conversation_items(request.items or [])
    if request.safety_identifier is not None:
        check_no_nul(request.safety_identifier, "safety_identifier")
    return NewConversation(items, check_metadata(request.metadata) or {}, request.safety_identifier)


def parse_update(raw: bytes) -> dict[str, str]:
    return check_metadata(_parse(UpdateConversationRequest, raw).metadata) or {}


def parse_add_items(raw: bytes) -> list[Item]:
    items = _parse(AddItemsRequest, raw).items
    if not items:
        raise InvalidRequest(
            "'items' must hold at least one item.", param="items", code="invalid_value"
        )
    return conversation_items(items)


def conversation_items(raw: list[Any]) -> list[Item]:
    if len(raw) > MAX_CONVERSATION_ITEMS_PER_CALL:
        raise InvalidRequest(
            f"You may add at most {MAX_CONVERSATION_ITEMS_PER_CALL} items at a time, "
            f"got {len(raw)}.",
            param="items",
            code="too_many_items",
        )
    values = normalize_input(raw, assign_ids=True, param="items")
    items = [to_item(value, param=f"items[{index}]") for index, value in enumerate(values)]
    check_unique_ids(items, param="items")
    return items


def check_unique_ids(items: list[Item], *, param: str, taken: set[str] | None = None) -> None:
    """An item id names one item of a conversation; a second item may not reuse it."""
    seen = set(taken or ())
    for index, item in enumerate(items):
        if item.id in seen:
            raise duplicate_item(item.id, f"{param}[{index}].id")
        seen.add(item.id)


def duplicate_item(item_id: str, param: str) -> ApiError:
    return InvalidRequest(
        f"An item with id '{item_id}' is already in this conversation.",
        param=param,
        code="duplicate_item_id",
    )


def conversation_object(
    conversation_id: str, created_at: int, metadata: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "id": conversation_id,
        "object": "conversation",
        "created_at": created_at,
        "metadata": metadata or {},
    }


def deleted_object(conversation_id: str) -> dict[str, Any]:
    return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}


def item_list(
    data: list[dict[str, Any]], ids: list[str], *, has_more: bool = False
) -> dict[str, Any]:
    return {
        "object": "list",
        "data": data,
        "first_id": ids[0] if ids else None,
        "last_id": ids[-1] if ids else None,
        "has_more": has_more,
    }
