"""``prompt_cache_diagnostics`` for a turn, known before its terminal event.

Asked for with ``prompt_cache_options.comparison_response_id`` (any live response of the
caller's tenant; another tenant's id is not found), or, when the operator enabled
``AGENTIC_PROMPT_CACHE_DIAGNOSTICS_DEFAULT``, against the parent of a continuation. Against
the parent the turn's own account is the answer; against another response the same
account is made from that response's stored ids (one row read after the model ran).
"""

from __future__ import annotations

from typing import Any

from agentic_api.cache.accounting import Continuation, account
from agentic_api.cache.diagnostics import NOT_FOUND, UNAVAILABLE, diagnostics
from agentic_api.log import get_logger
from agentic_api.runtime import Services
from agentic_api.storage.responses import ResponseRepository
from agentic_api.turns.data.prepared import PreparedTurn
from agentic_api.turns.data.token_plan import TokenPlan, TokenRecord
from agentic_api.turns.runner.relay import StreamRelay
from agentic_api.turns.runner.tokens import stored_tokens
from agentic_api.upstream.token_fields import ReportedTokens
from lineage import ExecutionFingerprint

log = get_logger("agentic_api.turns.cache_diagnostics")


def comparison_id(services: Services, turn: PreparedTurn) -> str | None:
    """The response this turn's prompt is compared with, or None when none was asked for."""
    options = turn.request.prompt_cache_options
    if options is not None and options.comparison_response_id is not None:
        return options.comparison_response_id
    if services.settings.prompt_cache_diagnostics_default and turn.parent is not None:
        return turn.parent.id
    return None


async def cache_diagnostics(
    services: Services,
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
    services: Services,
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
    if plan is None or not isinstance(first, ReportedTokens):
        return dict(UNAVAILABLE)
    artifact = await stored_tokens(services, tenant_id, row)
    if isinstance(artifact, str):
        return dict(UNAVAILABLE)
    changes = turn.fingerprint.diff(ExecutionFingerprint.from_dict(row.fingerprint))
    made = account(
        Continuation(
            parent_id=row.id,
            changes=tuple(change.component for change in changes),
            parent_output_types=artifact.output_types,
        ),
        artifact.prompt,
        artifact.output,
        first.prompt,
        first.cached_tokens,
        plan.block_size,
    )
    return diagnostics(made)
