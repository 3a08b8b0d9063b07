"""Frames of shuffled rows: round trip, the byte bound, the offset ranges, the version."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import orjson
import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from service.core.frames import (
    HEADER_SIZE,
    MARKED_VERSION,
    SOURCE_BITS,
    VERSION,
    Frame,
    FrameError,
    FrameMark,
    FrameRow,
    RowOrigin,
    UnknownVersion,
    decode,
    encode,
    peek,
)
from service.core.shuffle import position

SOURCE = 5


def row(n: int, value: Any = None, **kw: Any) -> FrameRow:
    """Row ``n`` of a source partition: key ``u<n>``, its value's JSON bytes."""
    if value is None:
        value = {"user": f"u{n}", "ts": 1000 + n, "amount": n / 4}
    return (
        kw.get("key", f"u{n}"),
        1000 + n,
        position(n),
        kw.get("raw", orjson.dumps(value)),
        kw.get("kafka_key", f"o{n}".encode()),
        kw.get("kafka_ts", 2000 + n),
        kw.get("headers", []),
    )


def rows_of(frames: list[bytes]) -> list[tuple[str, int, Any, int]]:
    return [r[:4] for data in frames for r in decode(data).records()]


def expected(rows: list[FrameRow]) -> list[tuple[str, int, Any, int]]:
    def value(v: Any) -> Any:
        return orjson.loads(v) if isinstance(v, bytes) else v

    return [(k, t, value(v), p << SOURCE_BITS | SOURCE) for k, t, p, v, *_ in rows]


# -- round trip ----------------------------------------------------------------------------
def test_every_row_comes_back_in_order_with_the_operator_s_position() -> None:
    rows = [row(n) for n in range(50)]
    (data,) = encode(rows, SOURCE, 1 << 20, encoded=True)
    frame = decode(data)
    assert len(frame) == 50
    assert [r[:4] for r in frame.records()] == expected(rows)
    assert frame.records()[7][4] == (frame, 7)  # the provenance: the frame and the row


def test_decoded_values_need_no_second_decode_and_equal_the_json() -> None:
    value = {"a": [1, 2.5, None, True], "b": {"c": "ü€😀"}, "d": -(2**63)}
    (data,) = encode([row(0, value)], SOURCE, 1 << 20, encoded=True)
    assert decode(data).values == [value]


def test_values_written_by_the_given_dumps_when_not_encoded() -> None:
    def dumps(value: Any) -> bytes:  # the sink's: sets as sorted lists
        return orjson.dumps(value, default=sorted)

    rows = [("k", 1, position(1), {"s": {3, 1}}, None, None, [])]
    (data,) = encode(rows, SOURCE, 1 << 20, dumps=dumps)
    assert decode(data).values == [{"s": [1, 3]}]


def test_the_provenance_is_the_source_record_as_written() -> None:
    raw = b'{ "user" : "u1",  "x": 1.50 }'  # not orjson's spelling: forwarded as it was
    rows = [
        row(1, raw=raw, headers=[("trace", b"abc"), ("empty", None), ("ünï", b"")]),
        row(2, raw=None, kafka_key=None, kafka_ts=None),  # a tombstone
        row(3, kafka_key=b""),
    ]
    (data,) = encode(rows, SOURCE, 1 << 20, encoded=True)
    frame = decode(data)
    assert frame.values[1] is None
    assert frame.origin(0) == RowOrigin(
        position(1), b"o1", raw, 2001, (("trace", b"abc"), ("empty", None), ("ünï", b""))
    )
    assert frame.origin(1) == RowOrigin(position(2), None, None, None, ())
    assert frame.origin(2) == RowOrigin(position(3), b"", rows[2][3], 2003, ())
    assert frame.index_of(position(2)) == 1
    with pytest.raises(KeyError):
        frame.index_of(position(2) + 1)


def test_an_empty_batch_makes_no_frame() -> None:
    assert encode([], SOURCE, 1000) == []


def test_positions_must_strictly_increase() -> None:
    with pytest.raises(ValueError, match="strictly increase"):
        encode([row(2), row(1)], SOURCE, 1 << 20, encoded=True)
    with pytest.raises(ValueError, match="strictly increase"):
        encode([row(1), row(1)], SOURCE, 1 << 20, encoded=True)


def test_the_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        encode([row(1)], SOURCE, 0)


# -- the byte bound ------------------------------------------------------------------------
def test_a_frame_past_the_bound_splits_and_a_row_longer_than_it_goes_alone() -> None:
    rows = [row(n, {"blob": "x" * 5000}) if n == 10 else row(n) for n in range(30)]
    frames = encode(rows, SOURCE, 1000, encoded=True)
    sizes = [len(f) for f in frames]
    assert all(size <= 1000 for i, size in enumerate(sizes) if peek(frames[i]).rows > 1)
    assert [peek(f).rows for f in frames if len(f) > 1000] == [1]
    assert rows_of(frames) == expected(rows)


def test_a_bound_above_the_batch_makes_one_frame_and_exactly_the_bound_fits() -> None:
    rows = [row(n) for n in range(20)]
    (whole,) = encode(rows, SOURCE, 1 << 20, encoded=True)
    assert encode(rows, SOURCE, len(whole), encoded=True) == [whole]
    assert len(encode(rows, SOURCE, len(whole) - 1, encoded=True)) == 2


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
headers = st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=6)), max_size=2)


@st.composite
def batches(draw: st.DrawFn) -> list[FrameRow]:
    count = draw(st.integers(0, 40))
    offsets = sorted(draw(st.sets(st.integers(0, 2**40), min_size=count, max_size=count)))
    with_headers = draw(st.booleans())
    rows: list[FrameRow] = []
    for offset in offsets:
        value = draw(json_values)
        raw = None if value is None and draw(st.booleans()) else orjson.dumps(value)
        rows.append(
            (
                draw(st.text(max_size=12)),
                draw(st.integers(-(2**63), 2**63 - 1)),
                position(offset, draw(st.integers(0, 3))),
                raw,
                draw(st.none() | st.binary(max_size=10)),
                draw(st.none() | st.integers(-1, 2**50)),
                draw(headers) if with_headers else [],
            )
        )
    return rows


@seed(48)
@settings(max_examples=300, deadline=None)
@given(rows=batches(), max_bytes=st.integers(1, 3000))
def test_frames_cover_every_row_once_in_order_within_the_bound(
    rows: list[FrameRow], max_bytes: int
) -> None:
    frames = encode(rows, SOURCE, max_bytes, encoded=True)
    decoded = [decode(data) for data in frames]
    back = [
        (r[0], r[1], r[3], v) for f in decoded for r, v in zip(f.records(), f.values, strict=True)
    ]
    assert back == [
        (k, t, p << SOURCE_BITS | SOURCE, None if v is None else orjson.loads(v))
        for k, t, p, v, *_ in rows
    ]
    origins = [f.origin(i) for f in decoded for i in range(len(f))]
    assert origins == [RowOrigin(p, kk, v, kt, tuple(h)) for _, _, p, v, kk, kt, h in rows]
    for data, frame in zip(frames, decoded, strict=True):
        assert len(data) <= max_bytes or len(frame) == 1
        assert frame.first == frame.positions[0] and frame.last == frame.positions[-1]
        assert peek(data) == (VERSION, SOURCE, len(frame), frame.first, frame.last)
    for before, after in pairwise(frames):  # a frame could not hold more
        assert len(before) + len(after) - HEADER_SIZE - 2 > max_bytes


@seed(4848)
@settings(max_examples=200, deadline=None)
@given(rows=batches(), max_bytes=st.integers(200, 3000), data=st.data())
def test_a_replayed_frame_is_cut_at_the_position_applied_before(
    rows: list[FrameRow], max_bytes: int, data: st.DataObject
) -> None:
    for frame in map(decode, encode(rows, SOURCE, max_bytes, encoded=True)):
        applied = data.draw(st.integers(frame.first - 2, frame.last + 2))
        start = frame.start_after(applied)
        fresh = frame.records(start)
        assert [r[3] >> SOURCE_BITS for r in fresh] == [p for p in frame.positions if p > applied]
        assert [r[4] for r in fresh] == [(frame, i) for i in range(start, len(frame))]


def test_a_frame_replayed_whole_is_known_from_its_header_alone() -> None:
    (data,) = encode([row(n) for n in range(3, 9)], SOURCE, 1 << 20, encoded=True)
    header = peek(data)
    assert (header.first, header.last) == (position(3), position(8))
    frame = decode(data)
    assert frame.start_after(position(8)) == len(frame)
    assert frame.start_after(position(2)) == 0
    assert frame.records(len(frame)) == []


# -- the version and malformed frames ------------------------------------------------------
def test_an_unknown_version_is_refused_with_a_clear_error() -> None:
    (data,) = encode([row(1)], SOURCE, 1 << 20, encoded=True)
    assert data[0] == VERSION
    newer = bytes([MARKED_VERSION + 1]) + data[1:]
    with pytest.raises(UnknownVersion, match=r"version 3 is unknown.*reads versions 1 and 2"):
        decode(newer)
    with pytest.raises(UnknownVersion):
        peek(newer)


# -- marks: the source's watermark between rows (version 2) ---------------------------------
@st.composite
def marked(draw: st.DrawFn) -> tuple[list[FrameRow], list[FrameMark]]:
    rows = draw(batches().filter(bool))  # no rows, no frame: the caller sends a marker
    indexes = sorted(draw(st.sets(st.integers(0, len(rows)), max_size=len(rows) + 1)))
    watermarks = sorted(
        draw(st.lists(st.integers(-(2**40), 2**40), min_size=len(indexes), max_size=len(indexes)))
    )
    idles = draw(st.lists(st.booleans(), min_size=len(indexes), max_size=len(indexes)))
    return rows, list(zip(indexes, watermarks, idles, strict=True))


@seed(4849)
@settings(max_examples=300, deadline=None)
@given(case=marked(), max_bytes=st.integers(1, 3000))
def test_marks_come_back_before_the_rows_they_preceded_whatever_the_split(
    case: tuple[list[FrameRow], list[FrameMark]], max_bytes: int
) -> None:
    rows, marks = case
    frames = [
        decode(data)
        for data in encode(rows, SOURCE, max_bytes, encoded=True, marks=marks, sources=7)
    ]
    back: list[FrameMark] = []
    start = 0
    for frame in frames:
        assert all(0 <= index <= len(frame) for index, _, _ in frame.marks)
        back.extend((start + index, watermark, idle) for index, watermark, idle in frame.marks)
        assert not frame.marks or frame.sources == 7
        start += len(frame)
    assert back == marks
    assert [r[:4] for f in frames for r in f.records()] == expected(rows)


def test_a_frame_with_marks_is_version_2_and_one_without_version_1() -> None:
    rows = [row(n) for n in range(4)]
    (plain,) = encode(rows, SOURCE, 1 << 20, encoded=True)
    (marked_frame,) = encode(rows, SOURCE, 1 << 20, encoded=True, marks=[(2, 50, False)], sources=3)
    assert (plain[0], marked_frame[0]) == (VERSION, MARKED_VERSION)
    assert peek(marked_frame).rows == 4
    assert decode(plain).marks == []
    frame = decode(marked_frame)
    assert (frame.marks, frame.sources) == ([(2, 50, False)], 3)


def test_marks_after_the_last_row_go_to_the_last_frame() -> None:
    rows = [row(n) for n in range(30)]
    frames = [
        decode(d) for d in encode(rows, SOURCE, 400, encoded=True, marks=[(30, 9, True)], sources=1)
    ]
    assert len(frames) > 1
    assert [f.marks for f in frames[:-1]] == [[]] * (len(frames) - 1)
    assert frames[-1].marks == [(len(frames[-1]), 9, True)]


def test_marks_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match="increasing row order"):
        encode(
            [row(1), row(2)], SOURCE, 1 << 20, encoded=True, marks=[(1, 5, False), (1, 6, False)]
        )


@pytest.mark.parametrize("cut", [1, 8, 13])
def test_a_frame_whose_marks_are_cut_short_is_refused(cut: int) -> None:
    (data,) = encode(
        [row(1), row(2)], SOURCE, 1 << 20, encoded=True, marks=[(0, 5, False), (2, 6, False)]
    )
    with pytest.raises(FrameError):
        decode(data[:-cut])


def test_a_version_1_frame_with_the_marks_flag_is_refused() -> None:
    (data,) = encode([row(1)], SOURCE, 1 << 20, encoded=True, marks=[(1, 5, False)])
    with pytest.raises(FrameError, match="marks flag"):
        decode(bytes([VERSION]) + data[1:])


@pytest.mark.parametrize("cut", [0, 1, HEADER_SIZE - 1, HEADER_SIZE + 3, -1])
def test_a_truncated_frame_is_refused(cut: int) -> None:
    (data,) = encode([row(1), row(2)], SOURCE, 1 << 20, encoded=True)
    with pytest.raises(FrameError):
        decode(data[:cut])


def test_values_that_were_not_one_json_value_each_are_refused() -> None:
    rows = [row(1, raw=b"1, 2"), row(2)]  # stage 1 routes only values it decoded
    (data,) = encode(rows, SOURCE, 1 << 20, encoded=True)
    with pytest.raises(FrameError, match="2 rows holds 2 keys and 3 values"):
        decode(data)


def test_a_frame_is_a_plain_object_the_runtime_can_keep() -> None:
    (data,) = encode([row(1)], SOURCE, 1 << 20, encoded=True)
    assert isinstance(decode(data), Frame)
