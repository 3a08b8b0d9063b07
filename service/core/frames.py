"""Frames: many shuffled rows in one Kafka record, and back (issue 48).

Stage 1 of a keyed shuffle hands rows to stage 2 through the shuffle topic. One Kafka
record per row costs a record's framing and headers per row, and a second JSON decode
per row in stage 2. A frame carries the rows one source partition routes to one shuffle
partition in one flush, column by column, so that stage 2 decodes a frame with a few C
calls whatever its row count (``benchmarks/frames.py`` measured the candidates;
performance.md, "Frames: the encoding", says why this layout won).

Layout, version 1 (little-endian)::

    header   version (u8) | flags (u8: bit 0 = rows have headers) | source (u32) |
             rows (u32) | first position (i64) | last position (i64) |
             keys size (u32) | values size (u32) | Kafka keys size (u32) |
             headers size (u32)
    columns  event times i64[rows] | positions i64[rows] | Kafka timestamps i64[rows]
             (INT64 min: none) | value lengths i32[rows] (-1: no value) |
             Kafka key lengths i32[rows] (-1: none) | header lengths i32[rows] (flag only)
    sections keys: a JSON array of strings | values: a JSON array, one element per row
             (``null`` for a row without a value) | the Kafka keys, concatenated |
             the rows' headers, concatenated (see :func:`_pack_headers`)

**Marks** (version 2): a frame may also carry where its source's watermark advanced
between its rows, so that a stage 1 recomputing the watermark after every record
(``interval_ms: 0``) still writes one frame per target and batch instead of a frame and
a marker per record. Version 2 is version 1 with flag bit 1 set and one more section at
the end::

    marks    count (u32) | source partitions in all (u32) |
             per mark: row index (u32) | watermark (i64) | idle (u8)

A mark at row index ``i`` says the source's watermark (and idleness) became that before
row ``i``; ``i`` equal to the row count, after the last row. Only the newest mark before
a row is kept (a watermark only rises). A frame without marks is written as version 1.

The version byte comes first so a later layout can be told apart (:class:`UnknownVersion`).
The header alone (:func:`peek`) names the source partition and the first and last
position, so stage 2 can drop a replayed frame without decoding it.

Why the values travel as JSON: the route stage holds each row's JSON bytes as the
producer wrote them (or writes them once, when steps changed the value), so joining them
into one array costs no per-row encode, and stage 2 decodes every value of the frame in
one ``orjson.loads``. Joining is safe here, unlike at the source (performance.md, "Tried
and rejected"): stage 1 routes only values it decoded, each one well-formed JSON value.
The per-row value lengths let the late and dead-letter paths slice a row's bytes back out
(:meth:`Frame.origin`), so what they forward is what the producer wrote.

Rows within a frame are in position order, strictly increasing (a writer routes a source
partition in offset order), which :func:`encode` checks: a frame's positions lie between
its ``first`` and ``last``, and a partly replayed frame is cut at the position applied
before (:meth:`Frame.start_after`).

Pure: stage 1 calls :func:`encode` on a flush, stage 2 :func:`decode` per fetched frame.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from itertools import accumulate, islice, repeat
from operator import add, lt
from typing import Any, Final, NamedTuple

import orjson

VERSION: Final = 1
"""The layout :func:`encode` writes for a frame without marks."""
MARKED_VERSION: Final = 2
"""The layout of a frame with marks (:func:`decode` reads both)."""

SOURCE_BITS: Final = 16
"""An operator's input position is ``position << SOURCE_BITS | source``, as the shuffle
reader makes it: unique per source row, the same on every replay and replica."""

NO_TIMESTAMP: Final = -(1 << 63)
"""A Kafka timestamp that was None, in the int64 column."""

Header = tuple[str, bytes | None]

FrameRow = tuple[str, int, int, Any, bytes | None, int | None, Sequence[Header]]
"""What stage 1 hands :func:`encode` per row: ``(key, event time, position, value,
Kafka key, Kafka timestamp, headers)``. ``position`` is ``offset << 20 | element index``
in the source partition (``core/shuffle.py:position``); the last three are the source
record's, for the late and dead-letter records stage 2 may write. ``value`` is a
JSON-able value, or the JSON bytes of one value (``encoded=True``), or None for a record
without a value (a table's tombstone), whose frame value is ``null``."""

OperatorRow = tuple[str, int, Any, int, tuple["Frame", int]]
"""What :meth:`Frame.records` hands the operator (``operators/base.py:InputRecord``):
``(key, event time, value, position << 16 | source, (frame, index))``. The last is the
row's provenance, opaque to operators and read back through :meth:`Frame.origin`."""

_HEADER = struct.Struct("<BBIIqqIIII")
HEADER_SIZE: Final = _HEADER.size
_FLAG_HEADERS = 1
_FLAG_MARKS = 2
_MARKS_HEAD = struct.Struct("<II")
_MARK = struct.Struct("<IqB")
_FIXED = 3 * 8 + 2 * 4
"""Column bytes per row without headers; +4 with them."""
_NATIVE_LITTLE = sys.byteorder == "little"
_NULL = b"null"
_NO_MARKS: list[Any] = []  # shared by frames without marks, never mutated
_loads = orjson.loads
_dumps: Callable[[Any], bytes] = orjson.dumps


class FrameError(ValueError):
    """Bytes that are not a frame this codec reads (truncated, or inconsistent)."""


class UnknownVersion(FrameError):
    """A frame of a layout this codec does not know (a newer writer's)."""


FrameMark = tuple[int, int, bool]
"""``(row index, watermark, idle)``: before row ``index`` of the rows handed to
:func:`encode` (or of a decoded frame), its source's watermark became ``watermark``."""


class FrameHeader(NamedTuple):
    """What a frame says about itself before its columns are read."""

    version: int
    source: int
    """The source partition's number among the pipeline's (``stages.py:source_numbers``)."""
    rows: int
    first: int
    """The first row's position: every row's is between ``first`` and ``last``."""
    last: int


class RowOrigin(NamedTuple):
    """A row's provenance: the source record as its producer wrote it (late and dead
    letters forward these). ``value`` is the row's JSON bytes: the producer's unless
    stage 1's steps changed the value; None for a record without a value."""

    position: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None
    headers: tuple[Header, ...]


# -- encoding ------------------------------------------------------------------------------
def encode(
    rows: Sequence[FrameRow],
    source: int,
    max_bytes: int,
    *,
    encoded: bool = False,
    dumps: Callable[[Any], bytes] = _dumps,
    marks: Sequence[FrameMark] = (),
    sources: int = 0,
) -> list[bytes]:
    """Frames holding ``rows`` in order, each at most ``max_bytes`` long unless it holds
    a single row that alone is longer; every row in exactly one frame, none for no rows.

    ``marks``: where the source's watermark advanced among ``rows``, by index in
    ``rows``, increasing (each goes to the frame holding its row; one after the last
    row, to the last frame), with ``sources`` the pipeline's source partitions. The
    bound ``max_bytes`` does not count them (13 bytes each). No rows make no frame, so
    their marks are the caller's to send some other way.

    ``encoded``: the values are already JSON bytes (the source record's, when no steps
    ran), put in as they are; otherwise each is written with ``dumps`` (the sink's, which
    knows sets and other values orjson does not). Raises ValueError when the positions do
    not strictly increase (a replayed frame could not be cut by position then)."""
    if max_bytes <= 0:
        raise ValueError(f"max_bytes must be positive, not {max_bytes}")
    n = len(rows)
    if n == 0:
        return []
    keys, times, positions, values, kafka_keys, kafka_times, headers = zip(*rows, strict=True)
    if n > 1 and not all(map(lt, positions, islice(positions, 1, None))):
        raise ValueError("a frame's positions must strictly increase")

    key_doc, key_lengths = _keys(keys)
    if encoded:
        value_lengths = _lengths(values)
        value_pieces = [_NULL if v is None else v for v in values] if None in values else values
    elif None in values:
        value_pieces = [_NULL if v is None else dumps(v) for v in values]
        value_lengths = [
            -1 if v is None else len(p) for v, p in zip(values, value_pieces, strict=True)
        ]
    else:
        value_pieces = list(map(dumps, values))
        value_lengths = list(map(len, value_pieces))
    kafka_key_lengths = _lengths(kafka_keys)
    if None in kafka_times:
        kafka_times = tuple(NO_TIMESTAMP if t is None else t for t in kafka_times)
    header_pieces = list(map(_pack_headers, headers)) if any(headers) else None

    # per row: its columns, its key and value with a comma each, its Kafka key and headers
    fixed = _FIXED + (4 if header_pieces is not None else 0) + 2
    value_sizes = list(map(len, value_pieces))
    kafka_key_sizes = (
        [max(k, 0) for k in kafka_key_lengths] if None in kafka_keys else kafka_key_lengths
    )
    budget = max_bytes - HEADER_SIZE - 2  # the arrays' brackets, less one comma each
    total = fixed * n + sum(key_lengths) + sum(value_sizes) + sum(kafka_key_sizes)
    if header_pieces is not None:
        total += sum(map(len, header_pieces))
    if total <= budget:  # the common case: the flush's rows fit one frame
        return [
            _frame(
                source,
                slice(0, n),
                times,
                positions,
                kafka_times,
                value_lengths,
                kafka_key_lengths,
                key_doc,
                value_pieces,
                kafka_keys,
                header_pieces,
                _marks_section(marks, sources, 0) if marks else b"",
            )
        ]
    sizes = map(add, map(add, key_lengths, value_sizes), kafka_key_sizes)
    if header_pieces is not None:
        sizes = map(add, sizes, map(len, header_pieces))
    ends = list(accumulate(map(add, sizes, repeat(fixed)), initial=0))
    # where each key starts in key_doc: after "[" and every key before it with its comma
    key_starts = list(accumulate(map(add, key_lengths, repeat(1)), initial=1))

    frames: list[bytes] = []
    start = 0
    while start < n:
        stop = bisect_right(ends, ends[start] + budget, start + 1) - 1
        stop = max(stop, start + 1)  # a row longer than the bound goes alone
        own: Sequence[FrameMark] = ()
        if marks:
            last = stop == n  # the marks after the last row go to the last frame
            own = [m for m in marks if start <= m[0] < stop or (last and m[0] == n)]
        frames.append(
            _frame(
                source,
                slice(start, stop),
                times,
                positions,
                kafka_times,
                value_lengths,
                kafka_key_lengths,
                key_doc[key_starts[start] - 1 : key_starts[stop]],
                value_pieces,
                kafka_keys,
                header_pieces,
                _marks_section(own, sources, start) if own else b"",
            )
        )
        start = stop
    return frames


def _marks_section(marks: Sequence[FrameMark], sources: int, start: int) -> bytes:
    """A version 2 frame's marks section, their indexes made the frame's own (less
    ``start``)."""
    if any(b[0] <= a[0] for a, b in zip(marks, islice(marks, 1, None), strict=False)):
        raise ValueError("a frame's marks must be in increasing row order")
    pack = _MARK.pack
    return _MARKS_HEAD.pack(len(marks), sources) + b"".join(
        pack(index - start, watermark, 1 if idle else 0) for index, watermark, idle in marks
    )


def _frame(
    source: int,
    rows: slice,
    times: Sequence[int],
    positions: Sequence[int],
    kafka_times: Sequence[int],
    value_lengths: Sequence[int],
    kafka_key_lengths: Sequence[int],
    keys: bytes,
    value_pieces: Sequence[bytes],
    kafka_keys: Sequence[bytes | None],
    header_pieces: Sequence[bytes] | None,
    marks: bytes = b"",
) -> bytes:
    """One frame of ``rows``; with ``marks`` (a :func:`_marks_section`), version 2."""
    n = rows.stop - rows.start
    ints = array("q", times[rows])
    ints.extend(positions[rows])
    ints.extend(kafka_times[rows])
    lengths = array("i", value_lengths[rows])
    lengths.extend(kafka_key_lengths[rows])
    if header_pieces is not None:
        lengths.extend(map(len, header_pieces[rows]))
    if not _NATIVE_LITTLE:
        ints.byteswap()
        lengths.byteswap()
    if keys[0] != 0x5B:  # "[": a slice of the batch's keys starts at a comma
        keys = b"[" + keys[1:]
    if keys[-1] != 0x5D:  # "]": and ends at one
        keys = keys[:-1] + b"]"
    values = b"[" + b",".join(value_pieces[rows]) + b"]"
    present = kafka_keys[rows]
    kafka = b"".join(filter(None, present))  # None and b"" both add nothing
    heads = b"".join(header_pieces[rows]) if header_pieces is not None else b""
    flags = _FLAG_HEADERS if header_pieces is not None else 0
    head = _HEADER.pack(
        MARKED_VERSION if marks else VERSION,
        flags | _FLAG_MARKS if marks else flags,
        source,
        n,
        positions[rows.start],
        positions[rows.stop - 1],
        len(keys),
        len(values),
        len(kafka),
        len(heads),
    )
    return b"".join([head, ints.tobytes(), lengths.tobytes(), keys, values, kafka, heads, marks])


def _keys(keys: Sequence[str]) -> tuple[bytes, list[int]]:
    """The keys as one JSON array, and each key's length in it, in a few C calls: a key
    is its UTF-8 bytes in quotes unless orjson escaped something in it (a quote, a
    backslash, a control character), which the array's length shows; then each key is
    written alone (``orjson.dumps`` costs ~1.7 µs per call when its results are kept,
    measured in performance.md: that way for every key would cost more than the rest of
    the encode)."""
    doc = _dumps(keys)
    if "".join(keys).isascii():
        lengths = list(map(add, map(len, keys), repeat(2)))
    else:
        lengths = list(map(add, map(len, map(str.encode, keys)), repeat(2)))
    if len(doc) != sum(lengths) + len(keys) + 1:  # some key was escaped
        pieces = list(map(_dumps, keys))
        doc = b"[" + b",".join(pieces) + b"]"
        lengths = list(map(len, pieces))
    return doc, lengths


def _lengths(items: Sequence[bytes | None]) -> list[int]:
    """Byte lengths, -1 for None (without a Python call per item when none is None)."""
    if None in items:
        return [-1 if item is None else len(item) for item in items]
    return list(map(len, items))  # type: ignore[arg-type]


_HEADER_NAME = struct.Struct("<H")
_HEADER_VALUE = struct.Struct("<i")


def _pack_headers(headers: Sequence[Header]) -> bytes:
    """A row's headers: per header its name's length (u16) and UTF-8 bytes, its value's
    length (i32, -1 for None) and bytes. Headers are rare on the hot path: the frame has
    this section only when some row has one, and reads a row's only on the late path."""
    if not headers:
        return b""
    parts: list[bytes] = []
    for name, value in headers:
        raw = name.encode()
        parts.append(_HEADER_NAME.pack(len(raw)))
        parts.append(raw)
        parts.append(_HEADER_VALUE.pack(-1 if value is None else len(value)))
        if value is not None:
            parts.append(value)
    return b"".join(parts)


def _unpack_headers(data: bytes) -> tuple[Header, ...]:
    headers: list[Header] = []
    at = 0
    while at < len(data):
        (size,) = _HEADER_NAME.unpack_from(data, at)
        at += _HEADER_NAME.size
        name = data[at : at + size].decode()
        at += size
        (size,) = _HEADER_VALUE.unpack_from(data, at)
        at += _HEADER_VALUE.size
        if size < 0:
            headers.append((name, None))
        else:
            headers.append((name, data[at : at + size]))
            at += size
    return tuple(headers)


# -- decoding ------------------------------------------------------------------------------
def peek(data: bytes) -> FrameHeader:
    """The frame's header, its columns unread: enough to drop a frame replayed whole."""
    if not data:
        raise FrameError("an empty record is not a frame")
    if data[0] != VERSION and data[0] != MARKED_VERSION:
        raise UnknownVersion(
            f"frame layout version {data[0]} is unknown here (this codec reads versions "
            f"{VERSION} and {MARKED_VERSION}); was it written by a newer Clockwork?"
        )
    if len(data) < HEADER_SIZE:
        raise FrameError(f"truncated frame: {len(data)} bytes, its header alone is {HEADER_SIZE}")
    version, _flags, source, rows, first, last, *_ = _HEADER.unpack_from(data)
    return FrameHeader(version, source, rows, first, last)


def decode(data: bytes) -> Frame:
    """The frame's rows, keys and values decoded (one ``orjson.loads`` each for all the
    rows), the provenance left in the bytes until :meth:`Frame.origin` asks."""
    peek(data)
    _, flags, source, n, first, last, key_size, value_size, kafka_size, header_size = (
        _HEADER.unpack_from(data)
    )
    per_row = _FIXED + (4 if flags & _FLAG_HEADERS else 0)
    at = HEADER_SIZE + per_row * n
    end = at + key_size + value_size + kafka_size + header_size
    marks: list[FrameMark] = []
    sources = 0
    if (data[0] == MARKED_VERSION) != bool(flags & _FLAG_MARKS):
        raise FrameError("a frame's marks flag does not match its version")
    if flags & _FLAG_MARKS:
        marks, sources = _marks(data, end, n)
    elif len(data) != end:
        raise FrameError(f"frame of {len(data)} bytes does not match its header")
    view = memoryview(data)
    ints = array("q")
    ints.frombytes(view[HEADER_SIZE : HEADER_SIZE + 24 * n])
    if not _NATIVE_LITTLE:
        ints.byteswap()
    try:
        keys = _loads(view[at : at + key_size])
        values = _loads(view[at + key_size : at + key_size + value_size])
    except orjson.JSONDecodeError as exc:
        raise FrameError(f"a frame's keys or values are not JSON: {exc}") from exc
    if not isinstance(keys, list) or not isinstance(values, list):
        raise FrameError("a frame's keys and values must be JSON arrays")
    if len(keys) != n or len(values) != n:
        raise FrameError(f"a frame of {n} rows holds {len(keys)} keys and {len(values)} values")
    frame = Frame(
        data, source, first, last, keys, ints[:n].tolist(), ints[n : 2 * n].tolist(), values
    )
    if marks:
        frame.marks = marks
        frame.sources = sources
    return frame


def _marks(data: bytes, at: int, rows: int) -> tuple[list[FrameMark], int]:
    """The marks section starting at ``at`` (the end of the others), and the sources."""
    if len(data) < at + _MARKS_HEAD.size:
        raise FrameError(f"frame of {len(data)} bytes does not match its header")
    count, sources = _MARKS_HEAD.unpack_from(data, at)
    at += _MARKS_HEAD.size
    if len(data) != at + count * _MARK.size:
        raise FrameError(f"frame of {len(data)} bytes does not match its header and marks")
    marks: list[FrameMark] = []
    previous = -1
    for index, watermark, idle in _MARK.iter_unpack(data[at:]):
        if index <= previous or index > rows:
            raise FrameError(f"a frame's mark at row {index} is out of order or range")
        previous = index
        marks.append((index, watermark, bool(idle)))
    return marks, sources


class Frame:
    """A decoded frame: the columns the operator reads, and the bytes behind them."""

    __slots__ = (
        "_data",
        "_origins",
        "first",
        "keys",
        "last",
        "marks",
        "positions",
        "source",
        "sources",
        "times",
        "values",
    )

    def __init__(
        self,
        data: bytes,
        source: int,
        first: int,
        last: int,
        keys: list[str],
        times: list[int],
        positions: list[int],
        values: list[Any],
    ) -> None:
        self._data = data
        self.source = source
        self.first = first
        self.last = last
        self.keys = keys
        self.times = times
        """Event times, as stage 1 assigned them."""
        self.positions = positions
        """Positions in the source partition, strictly increasing."""
        self.values = values
        """Decoded values (None for a row without one)."""
        self.marks: list[FrameMark] = _NO_MARKS
        """Where the source's watermark advanced among the rows (version 2)."""
        self.sources = 0
        """The pipeline's source partitions, as the marks' writer knew them."""
        self._origins: _Origins | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def start_after(self, applied: int) -> int:
        """The index of the first row past position ``applied`` (the highest applied
        from this source before): ``len(self)`` for a frame replayed whole, 0 for one
        wholly new, between for one replayed in part (after a kill mid-frame)."""
        return bisect_right(self.positions, applied)

    def records(self, start: int = 0) -> list[OperatorRow]:
        """The operator's input records from row ``start`` on, in order (see
        :data:`OperatorRow`), built without a Python call per row."""
        source = self.source
        shifted = [p << SOURCE_BITS | source for p in islice(self.positions, start, None)]
        return list(
            zip(
                islice(self.keys, start, None),
                islice(self.times, start, None),
                islice(self.values, start, None),
                shifted,
                zip(repeat(self), range(start, len(self.keys))),
                strict=False,
            )
        )

    def index_of(self, position: int) -> int:
        """The row at ``position`` (a source position, not shifted); KeyError if none."""
        index = bisect_left(self.positions, position)
        if index == len(self.positions) or self.positions[index] != position:
            raise KeyError(position)
        return index

    def origin(self, index: int) -> RowOrigin:
        """Row ``index``'s source record (read from the frame's bytes on first use)."""
        origins = self._origins
        if origins is None:
            origins = self._origins = _Origins(self._data, len(self.keys))
        return origins.row(index, self.positions[index])


class _Origins:
    """The provenance columns of a frame, read when a late record or dead letter needs
    one (never on the path of every row)."""

    __slots__ = ("data", "headers", "kafka_keys", "kafka_times", "values")

    def __init__(self, data: bytes, n: int) -> None:
        _, flags, _, _, _, _, key_size, value_size, kafka_size, _ = _HEADER.unpack_from(data)
        at = HEADER_SIZE + 16 * n
        times = array("q")
        times.frombytes(data[at : at + 8 * n])
        lengths = array("i")
        width = 3 if flags & _FLAG_HEADERS else 2
        lengths.frombytes(data[at + 8 * n : at + 8 * n + 4 * width * n])
        if not _NATIVE_LITTLE:
            times.byteswap()
            lengths.byteswap()
        self.kafka_times = times
        sections = at + 8 * n + 4 * width * n + key_size
        # each value piece and a comma after it; ``null`` for a row without a value
        self.values = _Slices(data, sections + 1, lengths[:n], separator=1, absent=len(_NULL))
        sections += value_size
        self.kafka_keys = _Slices(data, sections, lengths[n : 2 * n])
        sections += kafka_size
        self.headers = _Slices(data, sections, lengths[2 * n :]) if width == 3 else None

    def row(self, index: int, position: int) -> RowOrigin:
        timestamp = self.kafka_times[index]
        headers = self.headers.at(index) if self.headers is not None else None
        return RowOrigin(
            position,
            self.kafka_keys.at(index),
            self.values.at(index),
            None if timestamp == NO_TIMESTAMP else timestamp,
            _unpack_headers(headers) if headers else (),
        )


class _Slices:
    """Byte strings laid end to end from ``start``, by their lengths (-1: None)."""

    __slots__ = ("data", "lengths", "starts")

    def __init__(
        self, data: bytes, start: int, lengths: Sequence[int], separator: int = 0, absent: int = 0
    ) -> None:
        self.data = data
        self.lengths = lengths
        steps = [(absent if length < 0 else length) + separator for length in lengths]
        self.starts = list(accumulate(steps, initial=start))

    def at(self, index: int) -> bytes | None:
        length = self.lengths[index]
        if length < 0:
            return None
        start = self.starts[index]
        return bytes(self.data[start : start + length])
