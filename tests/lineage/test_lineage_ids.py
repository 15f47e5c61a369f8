from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lineage.ids import (
    ID_HEX_LENGTH,
    IdKind,
    IdMinter,
    id_kind,
    id_timestamp_ms,
    is_valid_id,
    mint_id,
)

EXPECTED_PREFIXES = {
    "RESPONSE": "resp",
    "CONVERSATION": "conv",
    "MESSAGE": "msg",
    "FUNCTION_CALL": "fc",
    "FUNCTION_CALL_OUTPUT": "fco",
    "REASONING": "rs",
    "ITEM": "item",
    "MCP_CALL": "mcp",
    "MCP_LIST_TOOLS": "mcpl",
    "MCP_APPROVAL": "mcpr",
    "COMPACTION": "cmp",
    "TENANT": "ten",
    "API_KEY": "key",
    "ADMIN_KEY": "adm",
    "CALL": "call",
    "JOB": "job",
    "MESSAGE_TURN": "mturn",
    "MULTI_AGENT_CALL": "mac",
    "MULTI_AGENT_OUTPUT": "maco",
    "AGENT_MESSAGE": "amsg",
}


def _clock(readings: list[int]) -> Callable[[], int]:
    values: Iterator[int] = iter(readings)
    return lambda: next(values)


def _tail(value: str) -> int:
    return int(value.partition("_")[2][12:], 16)


def test_prefixes() -> None:
    assert {kind.name: kind.value for kind in IdKind} == EXPECTED_PREFIXES
    assert all("_" not in kind.value for kind in IdKind)


@pytest.mark.parametrize("kind", list(IdKind))
def test_minted_ids_have_the_documented_shape(kind: IdKind) -> None:
    value = mint_id(kind)
    assert re.fullmatch(rf"{kind.value}_[0-9a-f]{{48}}", value)
    assert id_kind(value) is kind
    assert is_valid_id(value)
    assert is_valid_id(value, kind)
    assert not any(is_valid_id(value, other) for other in IdKind if other is not kind)


def test_timestamp_is_the_mint_time() -> None:
    before = time.time_ns() // 1_000_000
    value = mint_id(IdKind.RESPONSE)
    after = time.time_ns() // 1_000_000
    assert before <= id_timestamp_ms(value) <= after


def test_ids_sort_in_mint_order_within_a_process() -> None:
    minted = [mint_id(IdKind.ITEM) for _ in range(5000)]
    assert sorted(minted) == minted
    assert len(set(minted)) == len(minted)


def test_same_millisecond_ids_still_increase() -> None:
    minter = IdMinter(clock_ms=lambda: 1_700_000_000_000)
    minted = [minter.mint(IdKind.MESSAGE) for _ in range(100)]
    assert sorted(minted) == minted
    assert len(set(minted)) == 100
    assert {id_timestamp_ms(v) for v in minted} == {1_700_000_000_000}


def test_clock_stepping_back_keeps_order_and_the_later_timestamp() -> None:
    minter = IdMinter(clock_ms=_clock([5_000, 4_000, 4_500, 6_000]))
    minted = [minter.mint(IdKind.JOB) for _ in range(4)]
    assert sorted(minted) == minted
    assert [id_timestamp_ms(v) for v in minted] == [5_000, 5_000, 5_000, 6_000]


def test_a_full_counter_borrows_the_next_millisecond() -> None:
    # The fake hands out a fresh tail at the very top of its range, so the
    # next step in that millisecond overflows.
    top = (1 << (4 * 36)) - 1
    draws = iter([top - 1, 5, 7])
    minter = IdMinter(clock_ms=lambda: 10, randbits=lambda _bits: next(draws))
    first, second = minter.mint(IdKind.CALL), minter.mint(IdKind.CALL)
    assert (id_timestamp_ms(first), _tail(first)) == (10, top - 1)
    assert (id_timestamp_ms(second), _tail(second)) == (11, 7)
    assert first < second


def test_tails_are_random_not_sequential() -> None:
    a = IdMinter(clock_ms=lambda: 1).mint(IdKind.ITEM)
    b = IdMinter(clock_ms=lambda: 1).mint(IdKind.ITEM)
    assert a != b
    minter = IdMinter(clock_ms=lambda: 1)
    first, second = minter.mint(IdKind.ITEM), minter.mint(IdKind.ITEM)
    # A step of exactly one would happen with probability 2**-64.
    assert _tail(second) - _tail(first) > 1


@pytest.mark.parametrize("reading", [-1, 1 << 48])
def test_a_clock_outside_the_id_range_is_an_error(reading: int) -> None:
    minter = IdMinter(clock_ms=lambda: reading)
    with pytest.raises(OverflowError):
        minter.mint(IdKind.ITEM)


def test_largest_timestamp_fits() -> None:
    value = IdMinter(clock_ms=lambda: (1 << 48) - 1).mint(IdKind.ITEM)
    assert value.startswith("item_ffffffffffff")
    assert id_timestamp_ms(value) == (1 << 48) - 1


def test_concurrent_minting_is_unique_and_ordered_per_thread() -> None:
    minter = IdMinter()
    results: list[list[str]] = [[] for _ in range(8)]

    def work(out: list[str]) -> None:
        out.extend(minter.mint(IdKind.ITEM) for _ in range(500))

    threads = [threading.Thread(target=work, args=(out,)) for out in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [v for out in results for v in out]
    assert len(set(everything)) == len(everything)
    assert all(sorted(out) == out for out in results)


@given(st.lists(st.integers(min_value=0, max_value=(1 << 48) - 2), min_size=1, max_size=50))
def test_any_clock_sequence_gives_strictly_increasing_ids(readings: list[int]) -> None:
    minter = IdMinter(clock_ms=_clock(readings))
    minted = [minter.mint(IdKind.RESPONSE) for _ in readings]
    assert all(a < b for a, b in itertools.pairwise(minted))
    assert all(id_timestamp_ms(v) >= r for v, r in zip(minted, readings, strict=True))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("resp_abc", IdKind.RESPONSE),
        ("resp_", IdKind.RESPONSE),
        ("mcpl_x", IdKind.MCP_LIST_TOOLS),
        ("mcp_x", IdKind.MCP_CALL),
        ("resp", None),
        ("", None),
        ("nope_abc", None),
        ("RESP_abc", None),
        ("_abc", None),
    ],
)
def test_id_kind_reads_only_the_prefix(value: str, expected: IdKind | None) -> None:
    assert id_kind(value) is expected


@pytest.mark.parametrize(
    "value",
    [
        "",
        "resp",
        "resp_",
        "resp_" + "0" * (ID_HEX_LENGTH - 1),
        "resp_" + "0" * (ID_HEX_LENGTH + 1),
        "resp_" + "A" * ID_HEX_LENGTH,
        "resp_" + "g" * ID_HEX_LENGTH,
        "resp__" + "0" * (ID_HEX_LENGTH - 1),
        "zzz_" + "0" * ID_HEX_LENGTH,
        "resp-" + "0" * ID_HEX_LENGTH,
    ],
)
def test_malformed_ids_are_invalid(value: str) -> None:
    assert not is_valid_id(value)
    with pytest.raises(ValueError, match="not a well-formed id"):
        id_timestamp_ms(value)


def test_a_hand_written_id_parses() -> None:
    value = "conv_00000000000a" + "f" * 36
    assert is_valid_id(value, IdKind.CONVERSATION)
    assert id_timestamp_ms(value) == 10


def test_buffered_random_bits_stay_within_their_width_and_cross_refills() -> None:
    from lineage.ids import _BufferedRandom

    source = _BufferedRandom()
    for bits in (1, 7, 8, 9, 63, 64, 143, 5000 * 8):
        values = [source.randbits(bits) for _ in range(300)]
        assert all(0 <= value < 2**bits for value in values)
        if bits >= 63:
            assert len(set(values)) == len(values)
    # 300 draws of 18 bytes cross several 4 KiB refills without repeating.
    assert len({source.randbits(143) for _ in range(1000)}) == 1000


def test_a_forked_child_never_reuses_the_parents_buffered_bits() -> None:
    import os

    from lineage.ids import _BufferedRandom

    source = _BufferedRandom()
    source.randbits(8)  # the buffer is filled and shared with a child from here on
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.write(write, source.randbits(143).to_bytes(18, "big"))
        os._exit(0)
    os.close(write)
    child = int.from_bytes(os.read(read, 18), "big")
    os.close(read)
    os.waitpid(pid, 0)
    assert child != source.randbits(143)
