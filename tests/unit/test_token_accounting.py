"""The pure pieces of token-level truth: packing ids, reading vLLM's token fields,
aligning two token sequences and accounting a continuation's reuse by cause."""

from __future__ import annotations

from array import array

import pytest

from agentic_api.cache.accounting import (
    Cause,
    Continuation,
    Status,
    account,
    align,
    cold_start,
    common_prefix,
)
from agentic_api.cache.codec import ArtifactCorrupt, pack_ids, unpack_ids
from agentic_api.cache.recent import RecentArtifacts, TokenArtifact
from agentic_api.operator.handlers.admin.token_account import explain_account
from agentic_api.upstream.capabilities import _BLOCK_SIZE
from agentic_api.upstream.token_fields import MissingTokens, ReportedTokens, take_reported_tokens


def ids(*values: int) -> array[int]:
    return array("I", values)


def test_ids_round_trip_and_a_damaged_blob_is_refused() -> None:
    tokens = array("I", [0, 1, 2**32 - 1, *range(5000)])
    blob = pack_ids(tokens)
    assert len(blob) < len(tokens) * 4
    assert unpack_ids(blob, len(tokens)) == tokens
    with pytest.raises(ArtifactCorrupt):
        unpack_ids(blob[: len(blob) // 2], len(tokens))
    with pytest.raises(ArtifactCorrupt):
        unpack_ids(blob, len(tokens) + 1)
    with pytest.raises(ArtifactCorrupt):
        unpack_ids(blob, len(tokens), "u16")


def usage(prompt: int, output: int, cached: int = 0) -> dict[str, object]:
    return {
        "input_tokens": prompt,
        "output_tokens": output,
        "input_tokens_details": {"cached_tokens": cached},
    }


def test_token_fields_are_taken_out_and_checked_against_usage() -> None:
    final = {
        "usage": usage(3, 2, 0),
        "input_messages": [{"type": "raw_message_tokens", "message": "x", "tokens": [5, 6, 7]}],
        "output_messages": [{"type": "raw_message_tokens", "message": "y", "tokens": [8, 2]}],
    }
    found = take_reported_tokens(final)
    assert isinstance(found, ReportedTokens)
    assert list(found.prompt) == [5, 6, 7] and list(found.output) == [8, 2]
    assert "input_messages" not in final and "output_messages" not in final

    short = {
        **final,
        "input_messages": [{"tokens": [5, 6]}],
        "output_messages": [{"tokens": [8, 2]}],
    }
    assert "usage.input_tokens is 3" in take_reported_tokens(short).reason  # type: ignore[union-attr]
    harmony = {"usage": usage(1, 1), "input_messages": [{"role": "user"}], "output_messages": []}
    assert isinstance(take_reported_tokens(harmony), MissingTokens)
    for bad in ([-1], [2**32], [True], [1.0], ["5"], [None], [5, 6, [7]]):
        malformed = {
            "usage": usage(1, 1),
            "input_messages": [{"tokens": bad}],
            "output_messages": [],
        }
        refused = take_reported_tokens(malformed)
        assert isinstance(refused, MissingTokens), bad
        assert "not unsigned 32-bit integers" in refused.reason, bad
    largest = {
        "usage": usage(2, 0),
        "input_messages": [{"tokens": [0, 2**32 - 1]}],
        "output_messages": [],
    }
    kept = take_reported_tokens(largest)
    assert isinstance(kept, ReportedTokens) and list(kept.prompt) == [0, 2**32 - 1]
    absent = take_reported_tokens({"usage": usage(1, 1, 0)})
    assert (
        isinstance(absent, MissingTokens) and absent.reason == "the upstream returned no token ids"
    )


def test_common_prefix_matches_a_plain_loop() -> None:
    a = array("I", range(3000))
    for cut in (0, 1, 31, 1500, 2999):
        b = array("I", a)
        b[cut] = 99999
        assert common_prefix(a, b) == cut
    assert common_prefix(a, a[:100]) == 100
    assert common_prefix(ids(), ids(1)) == 0


def test_a_local_re_split_realigns_and_a_dropped_span_does_not() -> None:
    parent = ids(1, 2, 3, 40, 5, 6, 7, 8, 9)
    resplit = ids(1, 2, 3, 41, 42, 5, 6, 7, 8, 9, 10)
    found = align(parent, resplit, 3)
    assert found.realigned and found.splits[0].parent == (40,)
    assert found.splits[0].child == (41, 42)
    dropped = ids(1, 2, 3, 9, 10)
    assert not align(parent, dropped, 3).realigned
    two = ids(1, 2, 3, 41, 42, 5, 6, 70, 71, 8, 9)
    assert align(ids(1, 2, 3, 40, 5, 6, 7, 8, 9), two, 3).realigned


BLOCK = 4


def test_a_token_exact_continuation_expects_every_full_block() -> None:
    parent_prompt, parent_output = ids(*range(10)), ids(10, 11, 12)
    prompt = ids(*range(13), 20, 21, 22)
    made = account(Continuation("p"), parent_prompt, parent_output, prompt, 12, BLOCK)
    assert made.status is Status.EXACT and made.reusable_tokens == 13
    # The parent's last output token has no KV: 12 tokens computed, 3 full blocks.
    assert made.expected_cached == made.ideal_cached == 12
    assert made.lost == {Cause.PARTIAL_BLOCK: 1} and made.cause is Cause.PARTIAL_BLOCK
    short = account(Continuation("p"), parent_prompt, parent_output, prompt, 8, BLOCK)
    assert short.lost[Cause.NOT_RESIDENT] == 4 and short.cause is Cause.NOT_RESIDENT
    more = account(Continuation("p"), parent_prompt, parent_output, prompt, 16, BLOCK)
    assert more.extra_cached == 4


def test_a_siblings_blocks_serving_more_leave_the_parents_losses_alone() -> None:
    # The parent's output diverges at 11 (a local re-split); a sibling that sent this
    # very prompt stored its blocks, so vLLM served 16 where the parent alone gives 8.
    parent_prompt, parent_output = ids(*range(10)), ids(10, 11, 12, 13, 14, 15)
    prompt = ids(*range(11), 50, 51, 12, 13, 14, 15, 30, 31)
    alone = account(Continuation("p"), parent_prompt, parent_output, prompt, 8, BLOCK)
    assert alone.lost == {Cause.RETOKENIZATION: 5, Cause.PARTIAL_BLOCK: 3}
    assert alone.extra_cached == 0
    for served in (12, 16):
        helped = account(Continuation("p"), parent_prompt, parent_output, prompt, served, BLOCK)
        assert helped.expected_cached == 8 and helped.measured_cached == served
        # What the parent could not give is the same whatever a sibling left behind;
        # what the sibling's blocks served is counted apart.
        assert helped.lost == alone.lost and helped.cause is Cause.RETOKENIZATION
        assert helped.extra_cached == served - 8
        assert sum(helped.lost.values()) == 16 - min(served, helped.expected_cached)
        # The ideal is never below what was served.
        assert helped.ideal_cached == max(12, served)
        assert "more were cached from a prefix shared with other requests" in (
            explain_account(helped.to_dict())
        )
    # Served less than expected: the parent's own blocks were not all resident.
    evicted = account(Continuation("p"), parent_prompt, parent_output, prompt, 4, BLOCK)
    assert evicted.lost == {**alone.lost, Cause.NOT_RESIDENT: 4}


def test_divergences_are_attributed_by_where_and_how() -> None:
    parent_prompt, parent_output = ids(*range(10)), ids(10, 11, 12, 13, 14, 15)
    retokenized = ids(*range(11), 50, 51, 12, 13, 14, 15, 30)
    made = account(Continuation("p"), parent_prompt, parent_output, retokenized, 8, BLOCK)
    assert made.cause is Cause.RETOKENIZATION and made.divergence is not None
    assert made.divergence.offset == 11 and made.divergence.region == "output"
    assert made.lost[Cause.RETOKENIZATION] == 16 - 11
    assert made.expected_cached == 8 and made.ideal_cached == 12

    dropped = ids(*range(10), 15, 30, 31)
    template = account(Continuation("p"), parent_prompt, parent_output, dropped, 8, BLOCK)
    assert template.cause is Cause.TEMPLATE and not template.divergence.realigned  # type: ignore[union-attr]

    rewritten = ids(0, 1, 2, 99, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 30)
    early = account(Continuation("p"), parent_prompt, parent_output, rewritten, 0, BLOCK)
    assert early.cause is Cause.TEMPLATE and early.divergence.region == "prompt"  # type: ignore[union-attr]
    tools = account(Continuation("p", ["tools"]), parent_prompt, parent_output, rewritten, 0, BLOCK)
    assert tools.cause is Cause.FINGERPRINT
    # A change that renders nothing does not explain a divergence in the output.
    choice = Continuation("p", ["tool_choice"])
    assert account(choice, parent_prompt, parent_output, dropped, 8, BLOCK).cause is Cause.TEMPLATE
    edited = Continuation("p", history_edited=True)
    assert account(edited, parent_prompt, parent_output, rewritten, 0, BLOCK).cause is (
        Cause.HISTORY_EDITED
    )
    # Another reasoning context leaves out the parent's own reasoning: in its output.
    context = Continuation("p", ["reasoning_context"])
    assert account(context, parent_prompt, parent_output, dropped, 8, BLOCK).cause is (
        Cause.FINGERPRINT
    )


def test_an_isolating_change_expects_nothing() -> None:
    parent_prompt, parent_output = ids(*range(10)), ids(10, 11)
    prompt = ids(*range(12), 20)
    made = account(
        Continuation("p", ["salt_epoch"]), parent_prompt, parent_output, prompt, 0, BLOCK
    )
    assert made.status is Status.EXACT and made.expected_cached == 0
    assert made.lost == {Cause.FINGERPRINT: 12} and made.cause is Cause.FINGERPRINT
    assert "isolates the prefix cache" in explain_account(made.to_dict())


def test_unknown_and_cold_accounts_say_so() -> None:
    made = account(Continuation("p"), ids(1), ids(2), ids(1, 2, 3), None, BLOCK)
    assert made.status is Status.UNKNOWN and "cached_tokens" in (made.reason or "")
    cold = cold_start(40, 16, BLOCK)
    assert cold.cause is Cause.COLD_START and cold.extra_cached == 16
    assert explain_account(cold.to_dict()).startswith("First turn of its session")


def test_explanations_name_the_split() -> None:
    stored = account(
        Continuation("p"),
        ids(*range(10)),
        ids(10, 11, 12, 13),
        ids(*range(11), 50, 51, 12, 13, 9),
        8,
        BLOCK,
    ).to_dict()
    stored["divergence"]["parent_pieces"] = ["\n\n"]
    stored["divergence"]["child_pieces"] = ["\n", "\n"]
    assert "one token ['\\n\\n'] became two ['\\n', '\\n']" in explain_account(stored)


def test_recent_artifacts_are_bounded_and_tenant_scoped() -> None:
    def artifact(name: str, tenant: str = "t") -> TokenArtifact:
        return TokenArtifact(name, tenant, "d", array("I", range(100)), array("I"), ())

    recent = RecentArtifacts(max_bytes=3 * artifact("x").size)
    for name in ("a", "b", "c", "d"):
        recent.keep(artifact(name))
    assert len(recent) == 3 and recent.get("t", "a") is None
    assert recent.get("t", "d") is not None and recent.get("other", "d") is None


def test_block_size_is_read_from_vllm_metrics() -> None:
    line = (
        'vllm:cache_config_info{_block_size_resolved="True",block_size="32",'
        'hash_block_size="None"} 1.0\n'
    )
    found = _BLOCK_SIZE.search("# HELP x\n" + line)
    assert found is not None and found.group(1) == "32"


def test_the_cut_off_tail_of_an_answer_is_re_tokenization() -> None:
    parent_prompt, parent_output = ids(*range(10)), ids(10, 11, 250, 251)
    # The two byte tokens of an unfinished character do not come back.
    prompt = ids(*range(12), 2, 30, 31)
    cut = Continuation("p", parent_cut_off=True)
    made = account(cut, parent_prompt, parent_output, prompt, 12, BLOCK)
    assert made.cause is Cause.RETOKENIZATION and made.divergence.remainder == 2  # type: ignore[union-attr]
    assert "cut off inside a character" in explain_account(made.to_dict())
    whole = account(Continuation("p"), parent_prompt, parent_output, prompt, 12, BLOCK)
    assert whole.cause is Cause.TEMPLATE
