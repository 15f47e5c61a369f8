"""A turn's token truth: ask the upstream for the exact token ids, keep them as the
turn's artifact, and account the turn's prefix reuse against its parent's.

Off the client's critical path as far as it can be: the parent's artifact is read while
the model runs (or found in this process's recent artifacts), the account is a few
memcmp's, packing is one zstd call, the artifact is written in the turn's own commit, and
decoding a divergence's tokens for people to read happens after the terminal event.
Nothing here fails a turn: missing or bad token data gives an account that says
"unknown" and why. The client sees that account as ``prompt_cache_diagnostics`` when it
asks (``cache_diagnostics``, at the end of this module).
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from agentic_api import tracing
from agentic_api.cache.accounting import (
    Cause,
    Continuation,
    TokenAccount,
    account,
    cache_write,
    cold_start,
    unknown,
    with_pieces,
)
from agentic_api.cache.codec import ENCODING, ArtifactCorrupt, pack_ids, unpack_ids
from agentic_api.cache.diagnostics import NOT_FOUND, UNAVAILABLE, diagnostics
from agentic_api.cache.recent import TokenArtifact
from agentic_api.errors import ApiError
from agentic_api.log import get_logger
from agentic_api.metrics import record_cache_write, record_token_account
from agentic_api.runtime import Runtime
from agentic_api.storage.fault_log import log_step_failure
from agentic_api.storage.models import Response, TokenArtifactRow
from agentic_api.storage.responses import ResponseRepository
from agentic_api.storage.token_artifacts import TokenArtifactRepository
from agentic_api.turns.data.prepared import PreparedTurn
from agentic_api.turns.data.token_plan import TOKEN_IDS_FIELD, TokenPlan, TokenRecord
from agentic_api.turns.prepare.history import salt_identity
from agentic_api.turns.prepare.render import streams_upstream
from agentic_api.turns.runner.relay import StreamRelay
from agentic_api.upstream.capabilities import TokenCapabilities
from agentic_api.upstream.token_fields import MissingTokens, ReportedTokens
from agentic_api.wire.items import Item
from lineage import ExecutionFingerprint, FingerprintChange, canonical_json, prefix_digest

log = get_logger("agentic_api.turns.tokens")

DECODE_SECONDS = 5.0


def attach_tokens(services: Runtime, turn: PreparedTurn) -> tuple[PreparedTurn, TokenPlan | None]:
    """Before the turn is sent: the turn with its fingerprint bound to the upstream's
    tokenizer and, for a stored turn on an upstream that reports ids, its body asking for
    them; and then the plan, whose read of the parent's ids has started."""
    capabilities = services.tokens.get(turn.request.model)
    if capabilities is None:
        return turn, None
    if capabilities.tokenizer:
        turn = _bind_tokenizer(turn, capabilities.tokenizer)
    asked = turn.request.store and capabilities.ids_for(streams_upstream(turn.request))
    if not asked:
        return turn, None
    plan = TokenPlan(capabilities, engine_block_size(services, capabilities), asked=True)
    if turn.parent is not None:
        plan.parent = asyncio.get_running_loop().create_task(
            stored_tokens(services, turn.caller.tenant_id, turn.parent)
        )
    if not turn.runs_tools:
        # The tool loop renders its own rounds (turns/kinds/tool_loop.py adds the field).
        turn = replace(turn, body=canonical_json(TOKEN_IDS_FIELD)[:-1] + b"," + turn.body[1:])
    return turn, plan


# Why a continuation has no account when no source names the engine's block size.
UNKNOWN_BLOCK_SIZE = (
    "the engine's KV block size is unknown (no AGENTIC_KV_BLOCK_SIZE, no cache_config_info "
    "in the upstream's /metrics, no KV event yet)"
)


def engine_block_size(services: Runtime, capabilities: TokenCapabilities) -> int | None:
    """The KV block size the engine reports: the setting, its /metrics, else the block
    size its KV events carry; None rather than an assumed default."""
    size = services.tokens.block_size(capabilities)
    if size is None and services.residency is not None:
        size = services.residency.block_size()
    return size


def _bind_tokenizer(turn: PreparedTurn, tokenizer: str) -> PreparedTurn:
    bound = replace(turn, fingerprint=replace(turn.fingerprint, tokenizer=tokenizer))
    if turn.parent is None:
        return bound
    before = turn.parent.fingerprint.get("tokenizer")
    if isinstance(before, str) and before and before != tokenizer:
        return replace(
            bound,
            fingerprint_changes=[
                *turn.fingerprint_changes,
                FingerprintChange("tokenizer", "the upstream's tokenizer or chat template changed"),
            ],
        )
    return bound


async def stored_tokens(services: Runtime, tenant_id: str, parent: Response) -> TokenArtifact | str:
    """A stored response's exact tokens (its prompt and output ids), or why there are none."""
    kept = services.artifacts.get(tenant_id, parent.id)
    if kept is not None:
        return kept
    try:
        async with services.db.turn_read() as session:
            row = await TokenArtifactRepository(session).get(tenant_id, parent.id)
    except Exception as exc:
        log.warning("could not read the parent's token ids", parent=parent.id, error=str(exc))
        return "the parent's token ids could not be read"
    if row is None:
        retention = timedelta(seconds=services.settings.token_artifact_retention_seconds)
        if parent.created_at < datetime.now(UTC) - retention:
            return "the parent's token ids expired (AGENTIC_TOKEN_ARTIFACT_RETENTION_SECONDS)"
        return (
            "the parent has no token ids (not reported by the upstream, or made without the model)"
        )
    if row.fingerprint_digest != parent.fingerprint_digest:
        return "the parent's token ids were made under another fingerprint than the parent's"
    try:
        return TokenArtifact(
            parent.id,
            tenant_id,
            row.fingerprint_digest,
            unpack_ids(row.prompt_ids, row.prompt_count, row.encoding),
            unpack_ids(row.output_ids, row.output_count, row.encoding),
            tuple(row.output_types),
        )
    except ArtifactCorrupt as exc:
        return f"the parent's token ids are unreadable: {exc}"


async def settle_tokens(
    services: Runtime,
    turn: PreparedTurn,
    plan: TokenPlan | None,
    relay: StreamRelay,
    model_output: Sequence[Item],
) -> TokenRecord | None:
    """After the model answered, before the commit: the turn's artifact and account."""
    if plan is None:
        return None
    try:
        return await _settle(services, turn, plan, relay.token_rounds, model_output)
    except Exception:
        # A bug here must not cost the client its turn.
        log.exception("token accounting failed", response_id=turn.response_id)
        return TokenRecord(
            None, None, unknown("token accounting failed", parent_id=_parent_id(turn))
        )


async def _settle(
    services: Runtime,
    turn: PreparedTurn,
    plan: TokenPlan,
    rounds: Sequence[ReportedTokens | MissingTokens],
    model_output: Sequence[Item],
) -> TokenRecord:
    parent_id = _parent_id(turn)
    if not rounds:
        return TokenRecord(None, None, unknown("no upstream answer", parent_id=parent_id))
    first, last = rounds[0], rounds[-1]
    streamed = streams_upstream(turn.request)
    for found in (first, last):
        if isinstance(found, MissingTokens):
            if found.absent:
                services.tokens.observed(turn.request.model, streamed, ids=False)
            return TokenRecord(
                None, None, unknown(found.reason, parent_id=parent_id, measured=found.cached_tokens)
            )
    services.tokens.observed(turn.request.model, streamed, ids=True)
    assert isinstance(first, ReportedTokens) and isinstance(last, ReportedTokens)
    made = await _account(turn, plan, first)
    written = cache_write(
        first.cache_write_tokens, len(first.prompt), first.cached_tokens, plan.block_size
    )
    if written is not None:
        made = replace(made, cache_write=written)
    if turn.compacts:
        # Its continuations replay the summary, not this prompt and output: nothing of
        # its tokens is theirs to reuse.
        return TokenRecord(None, None, made)
    if services.residency is not None:
        # What vLLM served this round is evidence of blocks held, whether or not this
        # process heard them stored (it may have started since).
        services.residency.served(
            turn.lineage.session_id,
            turn.caller.cache_salt,
            last.prompt + last.output,
            last.cached_tokens,
            plan.block_size,
        )
    output_types = tuple(item.type for item in model_output)
    kept = TokenArtifact(
        turn.response_id,
        turn.caller.tenant_id,
        turn.fingerprint.digest,
        last.prompt,
        last.output,
        output_types,
    )
    row = TokenArtifactRow(
        response_id=turn.response_id,
        tenant_id=turn.caller.tenant_id,
        created_at=datetime.now(UTC),
        model=turn.request.model,
        tokenizer=plan.capabilities.tokenizer,
        fingerprint_digest=kept.fingerprint_digest,
        salt_epoch=turn.caller.salt_epoch,
        encoding=ENCODING,
        prompt_count=len(last.prompt),
        output_count=len(last.output),
        prompt_ids=pack_ids(last.prompt),
        output_ids=pack_ids(last.output),
        output_types=list(output_types),
    )
    return TokenRecord(row, kept, made)


async def _account(turn: PreparedTurn, plan: TokenPlan, first: ReportedTokens) -> TokenAccount:
    if plan.parent is None:
        return cold_start(len(first.prompt), first.cached_tokens, plan.block_size)
    parent = await plan.parent
    parent_id = _parent_id(turn)
    if isinstance(parent, str):
        return unknown(parent, parent_id=parent_id, measured=first.cached_tokens)
    if plan.block_size is None:
        return unknown(UNKNOWN_BLOCK_SIZE, parent_id=parent_id, measured=first.cached_tokens)
    continuation = Continuation(
        parent_id=parent.response_id,
        changes=tuple(change.component for change in turn.fingerprint_changes),
        parent_output_types=parent.output_types,
        context_compacted="compaction" in parent.output_types,
        parent_cut_off=turn.parent is not None and turn.parent.status == "incomplete",
    )
    made = account(
        continuation,
        parent.prompt,
        parent.output,
        first.prompt,
        first.cached_tokens,
        plan.block_size,
    )
    if made.cause is Cause.TEMPLATE and _history_edited(turn):
        made = account(
            replace(continuation, history_edited=True),
            parent.prompt,
            parent.output,
            first.prompt,
            first.cached_tokens,
            plan.block_size,
        )
    return made


def _history_edited(turn: PreparedTurn) -> bool:
    """Whether a conversation turn's history no longer begins with exactly what its
    parent (the head) saw: items deleted or changed in between. (A previous_response_id
    chain's history is its parent's, verified.)"""
    parent = turn.parent
    if turn.conversation is None or parent is None or parent.prefix_digest is None:
        return False
    seen = turn.history[: parent.history_item_count]
    if len(seen) < parent.history_item_count:
        return True
    identity = salt_identity(turn.caller.tenant_id, parent.salt_epoch)
    return (
        prefix_digest(parent.model, identity, (item.data for item in seen)) != parent.prefix_digest
    )


def _parent_id(turn: PreparedTurn) -> str | None:
    return turn.parent.id if turn.parent is not None else None


def after_commit(
    services: Runtime, turn: PreparedTurn, plan: TokenPlan | None, record: TokenRecord | None
) -> None:
    """Once the turn is stored: keep its ids for its continuations, count its account,
    and decode a divergence for people to read (in the background)."""
    if record is None:
        return
    if record.kept is not None:
        services.artifacts.keep(record.kept)
    made = record.account
    tracing.record_token_account(
        tracing.current(),
        status=made.status.value,
        reusable=made.reusable_tokens,
        expected=made.expected_cached,
        measured=made.measured_cached,
        lost={cause.value: tokens for cause, tokens in made.lost.items()},
    )
    if made.cache_write is not None:
        record_cache_write(turn.request.model, agrees=made.cache_write.agrees)
    record_token_account(
        turn.request.model,
        turn.caller.tenant_id,
        status=made.status.value,
        reusable=made.reusable_tokens,
        expected=made.expected_cached,
        measured=made.measured_cached,
        lost={cause.value: tokens for cause, tokens in made.lost.items()},
    )
    divergence = record.account.divergence
    if divergence is not None and plan is not None and plan.capabilities.detokenize:
        services.spawn(_decode_divergence(services, turn, record.account))


async def _decode_divergence(services: Runtime, turn: PreparedTurn, made: TokenAccount) -> None:
    divergence = made.divergence
    assert divergence is not None
    model = turn.request.model
    try:
        async with asyncio.timeout(DECODE_SECONDS):
            pieces = await asyncio.gather(
                *(
                    services.upstream.detokenize(model, [token])
                    for token in (*divergence.parent_tokens, *divergence.child_tokens)
                )
            )
    except (ApiError, TimeoutError) as exc:
        log.info("divergence not decoded", response_id=turn.response_id, reason=str(exc))
        return
    split = len(divergence.parent_tokens)
    stored = with_pieces(made.to_dict(), pieces[:split], pieces[split:])
    try:
        async with services.db.write() as session:
            await TokenArtifactRepository(session).set_account(turn.response_id, stored)
    except Exception as exc:
        log_step_failure(
            log, "could not store the decoded divergence", exc, response_id=turn.response_id
        )


def cancel_parent_read(plan: TokenPlan | None) -> None:
    """A turn that ends without a commit no longer needs its parent's ids."""
    if plan is not None and plan.parent is not None and not plan.parent.done():
        plan.parent.cancel()


__all__ = [
    "TokenRecord",
    "after_commit",
    "attach_tokens",
    "cancel_parent_read",
    "settle_tokens",
    "stored_tokens",
]


# ``prompt_cache_diagnostics`` for a turn, known before its terminal event.

# Asked for with ``prompt_cache_options.comparison_response_id`` (any live response of the
# caller's tenant; another tenant's id is not found), or, when the operator enabled
# ``AGENTIC_PROMPT_CACHE_DIAGNOSTICS_DEFAULT``, against the parent of a continuation. Against
# the parent the turn's own account is the answer; against another response an account is
# made from that response's stored prompt ids (one row read after the model ran): its
# prompt is the prefix this turn can share with it. Its output is not: this turn does not
# continue it, so a prompt that repeats the compared one exactly is a hit when vLLM
# served that prefix, not a miss for leaving out an answer it never meant to extend.


def comparison_id(services: Runtime, turn: PreparedTurn) -> str | None:
    """The response this turn's prompt is compared with, or None when none was asked for."""
    options = turn.request.prompt_cache_options
    if options is not None and options.comparison_response_id is not None:
        return options.comparison_response_id
    if services.settings.prompt_cache_diagnostics_default and turn.parent is not None:
        return turn.parent.id
    return None


async def cache_diagnostics(
    services: Runtime,
    turn: PreparedTurn,
    plan: TokenPlan | None,
    record: TokenRecord | None,
    relay: StreamRelay,
) -> dict[str, Any] | None:
    compared = comparison_id(services, turn)
    if compared is None:
        return None
    try:
        return await _against(services, turn, compared, plan, record, relay)
    except Exception:
        # Like the account itself, a diagnosis never costs the client its turn.
        log.exception("prompt cache diagnostics failed", response_id=turn.response_id)
        return dict(UNAVAILABLE)


async def _against(
    services: Runtime,
    turn: PreparedTurn,
    compared: str,
    plan: TokenPlan | None,
    record: TokenRecord | None,
    relay: StreamRelay,
) -> dict[str, Any]:
    if turn.parent is not None and compared == turn.parent.id:
        return diagnostics(record.account) if record is not None else dict(UNAVAILABLE)
    tenant_id = turn.caller.tenant_id
    async with services.db.turn_read() as session:
        row = await ResponseRepository(session).get(tenant_id, compared, documents=False)
    if row is None:
        return dict(NOT_FOUND)
    rounds = relay.token_rounds
    first = rounds[0] if rounds else None
    if plan is None or plan.block_size is None or not isinstance(first, ReportedTokens):
        return dict(UNAVAILABLE)
    artifact = await stored_tokens(services, tenant_id, row)
    if isinstance(artifact, str):
        return dict(UNAVAILABLE)
    changes = turn.fingerprint.diff(ExecutionFingerprint.from_dict(row.fingerprint))
    made = account(
        Continuation(parent_id=row.id, changes=tuple(change.component for change in changes)),
        artifact.prompt,
        array("I"),
        first.prompt,
        first.cached_tokens,
        plan.block_size,
    )
    return diagnostics(made)
