"""How much of a chunk of pending input the loop takes at a time: pending_input.cut."""

from __future__ import annotations

from typing import Any

from hypothesis import given, seed, settings
from hypothesis import strategies as st

from service.runtime.consumer_group.pending_input import Chunk, cut, sources


class Source:
    """A fetched record's metadata: what an input's fifth field is (by identity)."""

    def __init__(self, offset: int) -> None:
        self.offset = offset


def chunk(inputs_per_offset: dict[int, int], end: int | None = None) -> Chunk:
    """A chunk of the records at the given offsets, each giving that many inputs (0: a
    dead letter or filtered out; more than 1: an unnest)."""
    inputs: list[Any] = []
    for offset, n in inputs_per_offset.items():
        source = Source(offset)
        inputs.extend(("k", 1_000 + offset, {"i": i}, offset, source) for i in range(n))
    offsets = list(inputs_per_offset)
    return Chunk(inputs, [], len(offsets), offsets[0], offsets[-1] + 1 if end is None else end)


def test_without_alignment_a_chunk_is_taken_whole() -> None:
    c = chunk({10: 1, 11: 1, 12: 2}, end=15)
    assert cut(c, None) == (4, 3, 15)


def test_the_next_offset_is_the_first_source_record_held_back() -> None:
    c = chunk({10: 1, 11: 1, 12: 1, 13: 1})
    assert cut(c, 2) == (2, 2, 12)


def test_the_first_cut_counts_the_records_that_gave_no_input() -> None:
    c = chunk({10: 1, 11: 0, 12: 1, 13: 0, 14: 1})
    assert cut(c, 1) == (1, 1 + 2, 12)


def test_a_later_cut_counts_only_the_source_records_it_takes() -> None:
    c = chunk({10: 1, 11: 0, 12: 1, 13: 1, 14: 1})
    c.taken, c.counted = 1, 2
    assert cut(c, 1) == (2, 1, 13)


def test_the_last_cut_counts_what_is_left_and_resumes_at_the_chunk_end() -> None:
    c = chunk({10: 1, 11: 1, 12: 0}, end=20)
    c.taken, c.counted = 1, 2
    assert cut(c, 1) == (2, 1, 20)


def test_a_cut_never_falls_between_the_inputs_of_one_source_record() -> None:
    c = chunk({10: 1, 11: 3, 12: 1})
    assert cut(c, 3) == (1, 1, 11)


def test_nothing_is_taken_while_alignment_admits_none() -> None:
    assert cut(chunk({10: 1, 11: 1}), 0) is None


def test_nothing_is_taken_while_alignment_admits_part_of_an_unnested_record() -> None:
    assert cut(chunk({10: 3, 11: 1}), 2) is None


def test_sources_counts_adjacent_inputs_of_one_record_once() -> None:
    c = chunk({10: 2, 11: 1, 12: 3})
    assert sources(c.inputs, 0, len(c.inputs)) == 3
    assert sources(c.inputs, 2, 5) == 2


@seed(4949)
@settings(max_examples=300, deadline=None)
@given(
    per_offset=st.lists(st.tuples(st.integers(1, 3), st.integers(0, 3)), min_size=1, max_size=20),
    tail=st.integers(0, 3),
    admissions=st.lists(st.none() | st.integers(0, 8), max_size=30),
)
def test_cuts_take_every_input_once_in_order_and_count_every_record_once(
    per_offset: list[tuple[int, int]], tail: int, admissions: list[int | None]
) -> None:
    offsets: dict[int, int] = {}
    offset = 0
    for gap, n in per_offset:
        offset += gap
        offsets[offset] = n
    c = chunk(offsets, end=offset + 1 + tail)
    inputs = c.inputs
    counted = 0
    next_offsets = []
    for admitted in [*admissions, None]:  # the last: alignment lets everything through
        if admitted is not None:  # alignment admits a prefix of what is left
            admitted = min(admitted, len(inputs) - c.taken)
        first_left = inputs[c.taken][4] if c.taken < len(inputs) else None
        taking = cut(c, admitted)
        if taking is None:
            assert admitted is not None and first_left is not None
            assert admitted < sum(1 for i in inputs[c.taken :] if i[4] is first_left)
            continue
        stop, records, next_offset = taking
        assert c.taken <= stop <= len(inputs)
        assert stop == len(inputs) or inputs[stop - 1][4] is not inputs[stop][4]
        if stop < len(inputs):
            assert next_offset == inputs[stop][4].offset
        else:
            assert next_offset == c.end
        if c.counted:  # after the first cut: the records behind its inputs, no more
            assert records == sources(inputs, c.taken, stop)
        c.taken = stop
        c.counted += records
        counted += records
        next_offsets.append(next_offset)
        if stop == len(inputs):
            break
    assert c.taken == len(inputs)
    assert counted == c.count
    assert next_offsets == sorted(next_offsets) and next_offsets[-1] == c.end
