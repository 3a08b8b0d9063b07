"""Encodings of a shuffle frame, measured side by side (issue 48): CPU and bytes per row.

A frame is what stage 1 writes as ONE Kafka record per (target shuffle partition, flush):
many rows of one source partition. Stage 2 must turn it back into what the operator takes,
``(key, event time, value, position << 16 | source, provenance)`` with ``value`` the
decoded payload dict, and keep the provenance a late record or a dead letter needs (the
source record's Kafka key, Kafka timestamp, headers and the value bytes as written). So
each candidate is timed on exactly that: stage 1's encode of a frame of N rows (from what
the route stage holds per row: key, event time, decoded value, position, the source
record's bytes, Kafka key, timestamp and headers), wrapped in one Kafka record; stage 2's
read of that Kafka record and decode into the operator's tuples.

Candidates (``CANDIDATES``):

- ``record per row (today)``: one Kafka record per row with the ``clockwork.shuffle``
  header (``runtime/shuffle/writer.py``), read back and decoded as
  ``runtime/shuffle/reader.py`` does (``orjson.loads`` per row). The baseline.
- ``arrow, JSON values``: an Arrow IPC record batch (key, event time, source, position,
  value as JSON bytes, Kafka key, Kafka timestamp, headers); stage 2 still
  ``orjson.loads`` each value.
- ``arrow, struct values``: the values as an Arrow struct column (schema inferred from the
  dicts). LOSSY: a field missing in one row comes back as ``None``, ints next to floats
  come back as floats; shown for its cost only.
- ``msgpack, dict values`` / ``msgpack, JSON values``: one msgpack document of columns,
  the values as msgpack maps (decoded in the same call) or as the JSON bytes stage 1
  has, then joined into one JSON array and decoded with one ``orjson.loads``.
- ``msgpack columns, JSON values array``: the columns but the values in msgpack, the
  values as one JSON array (as in the hybrid) beside it.
- ``orjson, dict values``: the columns as one orjson document (bytes columns in a binary
  section beside it: JSON has no bytes), the values as JSON objects in it.
- ``core/frames.py``: the chosen layout as implemented (the hybrid with JSON values).
- ``hybrid, JSON values`` / ``hybrid, dumps values``: the integer columns as packed
  int64 arrays, the keys as one JSON array, the values as ONE JSON array made by joining
  each row's JSON bytes (the source record's when no steps ran; ``orjson.dumps`` per row
  when they did), the per-row value lengths beside it so stage 2 can slice a row's bytes
  back out for a late record. Stage 2: ``array.frombytes`` and two ``orjson.loads``.

Joining rows' JSON into one array is safe here (performance.md rejected it for the
source, where a malformed record would shift the others): stage 1 only routes values it
has decoded, so each piece is one well-formed JSON value.

pyarrow (the ``spark`` extra) and msgpack (no group) are not dependencies of the service:
their candidates are left out when they are not installed.

Workloads: the standard workload's rows (``{"user","ts","amount"}`` keyed by user, Kafka
key an order id as in ``e2e --shuffle``) and a join's rows (orders and payments of
``e2e_join``, alternate frames). Per (workload, N) every candidate runs ``--rounds``
times, round robin, on the same rows; CPU is ``time.process_time`` over at least
``--rows`` rows, reported per row as min and median. Only ratios from one run compare
(the host is shared). Run: ``python -m benchmarks.frames [--rounds 5] [--rows 20000]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import tomllib
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any

import orjson
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords

from benchmarks.inprocess import gc_like_the_service
from benchmarks.workload import Workload, generate
from service.core import frames as codec

try:  # not dependencies of the service: their candidates are left out when missing
    import msgpack
except ImportError:  # pragma: no cover
    msgpack = None
try:
    import pyarrow as pa
    import pyarrow.ipc
except ImportError:  # pragma: no cover
    pa = None

ROUTED = "clockwork.shuffle"  # as runtime/shuffle/records.py (not imported: no runtime here)
Header = tuple[str, bytes]
Row = tuple[str, int, dict[str, Any], int, bytes, bytes | None, int, list[Header]]
"""What stage 1 holds per routed row: key, event time, decoded value, position, the
source record's value bytes, Kafka key, Kafka timestamp, headers."""
Out = tuple[str, int, Any, int, Any]
"""What stage 2 hands the operator: ``(key, event time, value, position, provenance)``."""

SOURCE = 3
BATCH_BYTES = 1 << 20
_loads = orjson.loads
_dumps = orjson.dumps


# -- Kafka records (per-record overhead of both ends) ---------------------------------------
def _builder() -> Any:
    return DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=BATCH_BYTES,
    )


def one_record(value: bytes) -> bytes:
    """A frame as the single record of a Kafka batch, as the producer would write it."""
    builder = _builder()
    builder.append(0, timestamp=None, key=None, value=value, headers=[])
    return bytes(builder.build())


def read_records(data: bytes) -> list[Any]:
    records = MemoryRecords(data)
    out: list[Any] = []
    while (batch := records.next_batch()) is not None:
        out.extend(batch)
    return out


# -- the baseline: one Kafka record per row ------------------------------------------------
def today_encode(rows: Sequence[Row]) -> bytes:
    import struct

    pack = struct.Struct(">qIq").pack
    builders = [_builder()]
    append = builders[0].append
    for offset, (key, ts, _value, at, raw, kkey, kts, headers) in enumerate(rows):
        meta = pack(ts, SOURCE, at) + key.encode()
        hs = [*headers, (ROUTED, meta)]
        if append(offset, timestamp=kts, key=kkey, value=raw, headers=hs) is None:
            builders.append(_builder())
            append = builders[-1].append
            append(offset, timestamp=kts, key=kkey, value=raw, headers=hs)
    return b"".join(bytes(b.build()) for b in builders)


def today_decode(data: bytes) -> list[Out]:
    import struct

    unpack = struct.Struct(">qIq").unpack_from
    out: list[Out] = []
    append = out.append
    loads = _loads
    for record in read_records(data):
        headers = record.headers
        name, meta = headers[-1]
        if name == ROUTED:
            ts, source, at = unpack(meta)
            value = loads(record.value)
            append((meta[20:].decode(), ts, value, at << 16 | source, record))
    return out


# -- shared pieces of the frame candidates -------------------------------------------------
def _blobs(items: Sequence[bytes | None]) -> tuple[bytes, bytes]:
    """Nullable byte strings as (int32 lengths, -1 for None; concatenation)."""
    if None in items:
        lengths = array("i", [-1 if b is None else len(b) for b in items])
        return lengths.tobytes(), b"".join([b for b in items if b is not None])
    return array("i", map(len, items)).tobytes(), b"".join(items)  # type: ignore[arg-type]


def _headers_blob(headers: Sequence[list[Header]]) -> bytes:
    """Empty when no row has headers (the common case); else JSON of them (rare path)."""
    return _dumps([[(n, v.hex()) for n, v in h] for h in headers]) if any(headers) else b""


@dataclass(slots=True)
class Decoded:
    """A decoded frame kept as the rows' provenance: late and dead-letter paths read it."""

    columns: Any


def _out(
    keys: list[str], ts: list[int], values: list[Any], pos: list[int], frame: Any
) -> list[Out]:
    source = SOURCE
    return list(zip(keys, ts, values, [p << 16 | source for p in pos], repeat(frame), strict=False))


def _columns(rows: Sequence[Row]) -> tuple[Any, ...]:
    return tuple(zip(*rows, strict=True))


# -- Arrow IPC -----------------------------------------------------------------------------
_HEADERS_TYPE = pa.list_(pa.struct([("name", pa.string()), ("value", pa.binary())])) if pa else None


def _arrow(columns: list[Any], names: list[str]) -> bytes:
    batch = pa.RecordBatch.from_arrays(columns, names=names)
    sink = pa.BufferOutputStream()
    with pyarrow.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue())


def _arrow_common(rows: Sequence[Row]) -> tuple[list[Any], Any]:
    keys, ts, values, pos, raws, kkeys, kts, headers = _columns(rows)
    n = len(keys)
    cols = [
        pa.array(keys, pa.string()),
        pa.array(ts, pa.int64()),
        pa.array(repeat(SOURCE, n), pa.uint32(), size=n),
        pa.array(pos, pa.int64()),
        pa.array(kkeys, pa.binary()),
        pa.array(kts, pa.int64()),
        pa.array(headers, _HEADERS_TYPE),
    ]
    return cols, (values, raws)


_ARROW_NAMES = ["key", "ts", "source", "position", "kafka_key", "kafka_ts", "headers", "value"]


def arrow_json_encode(rows: Sequence[Row]) -> bytes:
    cols, (_values, raws) = _arrow_common(rows)
    return one_record(_arrow([*cols, pa.array(raws, pa.binary())], _ARROW_NAMES))


def arrow_struct_encode(rows: Sequence[Row]) -> bytes:
    cols, (values, _raws) = _arrow_common(rows)
    return one_record(_arrow([*cols, pa.array(values)], _ARROW_NAMES))


def _arrow_batch(data: bytes) -> Any:
    (record,) = read_records(data)
    return pyarrow.ipc.open_stream(record.value).read_next_batch()


def arrow_json_decode(data: bytes) -> list[Out]:
    batch = _arrow_batch(data)
    values = list(map(_loads, batch.column(7).to_pylist()))
    col = batch.column
    return _out(col(0).to_pylist(), col(1).to_pylist(), values, col(3).to_pylist(), batch)


def arrow_struct_decode(data: bytes) -> list[Out]:
    batch = _arrow_batch(data)
    col = batch.column
    values = col(7).to_pylist()
    return _out(col(0).to_pylist(), col(1).to_pylist(), values, col(3).to_pylist(), batch)


# -- msgpack of columns --------------------------------------------------------------------
def _msgpack_encode(rows: Sequence[Row], dicts: bool) -> bytes:
    keys, ts, values, pos, raws, kkeys, kts, headers = _columns(rows)
    doc = [SOURCE, keys, ts, pos, values if dicts else raws, kkeys, kts, headers]
    return one_record(msgpack.packb(doc))


def msgpack_dict_encode(rows: Sequence[Row]) -> bytes:
    return _msgpack_encode(rows, True)


def msgpack_json_encode(rows: Sequence[Row]) -> bytes:
    return _msgpack_encode(rows, False)


def msgpack_dict_decode(data: bytes) -> list[Out]:
    (record,) = read_records(data)
    doc = msgpack.unpackb(record.value)
    return _out(doc[1], doc[2], doc[4], doc[3], doc)


def msgpack_json_decode(data: bytes) -> list[Out]:
    (record,) = read_records(data)
    doc = msgpack.unpackb(record.value)
    values = _loads(b"[" + b",".join(doc[4]) + b"]")
    return _out(doc[1], doc[2], values, doc[3], doc)


# -- orjson of columns ---------------------------------------------------------------------
def orjson_dict_encode(rows: Sequence[Row]) -> bytes:
    keys, ts, values, pos, _raws, kkeys, kts, headers = _columns(rows)
    doc = _dumps({"s": SOURCE, "k": keys, "t": ts, "p": pos, "v": values, "kt": kts})
    lengths, blob = _blobs(kkeys)
    side = lengths + blob + _headers_blob(headers)
    return one_record(len(doc).to_bytes(4, "little") + doc + side)


def orjson_dict_decode(data: bytes) -> list[Out]:
    (record,) = read_records(data)
    frame = record.value
    size = int.from_bytes(frame[:4], "little")
    doc = _loads(frame[4 : 4 + size])
    return _out(doc["k"], doc["t"], doc["v"], doc["p"], frame)


# -- hybrid: packed ints, keys and values as JSON arrays -----------------------------------
def _hybrid(rows: Sequence[Row], pieces: Sequence[bytes]) -> bytes:
    keys, ts, _values, pos, _raws, kkeys, kts, headers = _columns(rows)
    ints = array("q", ts)
    ints.extend(pos)
    ints.extend(kts)
    vlens = array("i", map(len, pieces))
    key_doc = _dumps(keys)
    value_doc = b"[" + b",".join(pieces) + b"]"
    klens, kblob = _blobs(kkeys)
    hblob = _headers_blob(headers)
    sizes = array("i", [len(keys), len(key_doc), len(value_doc), len(kblob), len(hblob)])
    parts = [sizes.tobytes(), ints.tobytes(), vlens.tobytes(), klens]
    return one_record(b"".join([*parts, key_doc, value_doc, kblob, hblob]))


def hybrid_json_encode(rows: Sequence[Row]) -> bytes:
    return _hybrid(rows, [row[4] for row in rows])


def hybrid_dumps_encode(rows: Sequence[Row]) -> bytes:
    return _hybrid(rows, list(map(_dumps, [row[2] for row in rows])))


def hybrid_decode(data: bytes) -> list[Out]:
    (record,) = read_records(data)
    frame = memoryview(record.value)
    sizes = array("i")
    sizes.frombytes(frame[:20])
    n, key_size, value_size, _kblob, _hblob = sizes
    at = 20
    ints = array("q")
    ints.frombytes(frame[at : at + 24 * n])
    at += 24 * n + 8 * n  # value and Kafka key lengths: read on the late path only
    keys = _loads(frame[at : at + key_size])
    at += key_size
    values = _loads(frame[at : at + value_size])
    ts = ints[:n].tolist()
    pos = ints[n : 2 * n].tolist()
    return _out(keys, ts, values, pos, Decoded(frame))


def mixed_encode(rows: Sequence[Row]) -> bytes:
    keys, ts, _values, pos, raws, kkeys, kts, headers = _columns(rows)
    doc = msgpack.packb([SOURCE, keys, ts, pos, kkeys, kts, headers])
    lengths = array("i", map(len, raws)).tobytes()
    values = b"[" + b",".join(raws) + b"]"
    return one_record(b"".join([len(doc).to_bytes(4, "little"), doc, lengths, values]))


def mixed_decode(data: bytes) -> list[Out]:
    (record,) = read_records(data)
    frame = memoryview(record.value)
    size = int.from_bytes(frame[:4], "little")
    doc = msgpack.unpackb(frame[4 : 4 + size])
    values = _loads(frame[4 + size + 4 * len(doc[1]) :])
    return _out(doc[1], doc[2], values, doc[3], doc)


_CODEC_ROWS: dict[int, tuple[Sequence[Row], list[codec.FrameRow]]] = {}
"""Each frame's rows in the codec's shape, made by the untimed first pass (``check``): in
the runtime the route stage would build them so in its routing loop. The rows are kept
with them, so an id is never reused while its entry is here."""


def codec_encode(rows: Sequence[Row]) -> bytes:
    """The chosen layout as implemented (``service/core/frames.py``), one frame."""
    entry = _CODEC_ROWS.get(id(rows))
    if entry is None or entry[0] is not rows:
        shaped = [(r[0], r[1], r[3], r[4], r[5], r[6], r[7]) for r in rows]
        entry = _CODEC_ROWS[id(rows)] = (rows, shaped)
    shaped = entry[1]
    (frame,) = codec.encode(shaped, SOURCE, 1 << 30, encoded=True)
    return one_record(frame)


def codec_decode(data: bytes) -> list[Out]:
    (record,) = read_records(data)
    return codec.decode(record.value).records()  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class Candidate:
    name: str
    encode: Callable[[Sequence[Row]], bytes]
    decode: Callable[[bytes], list[Out]]
    lossy: bool = False


ARROW = (
    Candidate("arrow, JSON values", arrow_json_encode, arrow_json_decode),
    Candidate("arrow, struct values", arrow_struct_encode, arrow_struct_decode, lossy=True),
)
MSGPACK = (
    Candidate("msgpack, dict values", msgpack_dict_encode, msgpack_dict_decode),
    Candidate("msgpack, JSON values", msgpack_json_encode, msgpack_json_decode),
    Candidate("msgpack columns, JSON values array", mixed_encode, mixed_decode),
)
CANDIDATES = (
    Candidate("record per row (today)", today_encode, today_decode),
    *(ARROW if pa is not None else ()),
    *(MSGPACK if msgpack is not None else ()),
    Candidate("orjson, dict values", orjson_dict_encode, orjson_dict_decode),
    Candidate("hybrid, JSON values", hybrid_json_encode, hybrid_decode),
    Candidate("hybrid, dumps values", hybrid_dumps_encode, hybrid_decode),
    Candidate("core/frames.py (hybrid, JSON values)", codec_encode, codec_decode),
)


# -- the rows ------------------------------------------------------------------------------
def standard_rows(count: int) -> list[Row]:
    """The standard workload as the route stage of ``e2e --shuffle`` holds it."""
    rows: list[Row] = []
    for n, event in enumerate(generate(Workload(events=count))):
        raw = event.to_json()
        rows.append(
            (event.user, event.ts, _loads(raw), n << 20, raw, f"o{n}".encode(), event.ts, [])
        )
    return rows


def join_rows(count: int) -> tuple[list[Row], list[Row]]:
    """Orders and payments as ``e2e_join`` writes them, keyed by order id."""
    orders: list[Row] = []
    payments: list[Row] = []
    for n, event in enumerate(generate(Workload(events=count))):
        order = f"o{n}"
        raw = f'{{"order":"{order}","user":"{event.user}","ts":{event.ts},"amount":1}}'.encode()
        orders.append(
            (order, event.ts, _loads(raw), n << 20, raw, event.user.encode(), event.ts, [])
        )
        paid = event.ts + n % 60_000
        raw = f'{{"order":"{order}","user":"{event.user}","paid_at":{paid},"amount":1}}'.encode()
        payments.append((order, paid, _loads(raw), n << 20, raw, order.encode(), paid, []))
    return orders, payments


def frames_of(rows: list[Row], size: int) -> list[list[Row]]:
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def expected(rows: Sequence[Row]) -> list[tuple[str, int, Any, int]]:
    return [(r[0], r[1], r[2], r[3] << 16 | SOURCE) for r in rows]


# -- measuring -----------------------------------------------------------------------------
@dataclass(slots=True)
class Result:
    encode: list[float]
    decode: list[float]
    bytes_per_row: float
    exact: bool


def check(candidate: Candidate, frames: list[list[Row]]) -> tuple[float, bool]:
    """Bytes per row, and whether every row came back equal (outside the timing)."""
    total = rows = 0
    exact = True
    for frame in frames:
        data = candidate.encode(frame)
        total += len(data)
        rows += len(frame)
        back = [row[:4] for row in candidate.decode(data)]
        exact = exact and back == expected(frame)
    return total / rows, exact


def measure(candidate: Candidate, frames: list[list[Row]]) -> tuple[float, float]:
    """CPU µs per row of encoding every frame, then of decoding them."""
    rows = sum(map(len, frames))
    encode = candidate.encode
    start = time.process_time()
    encoded = [encode(frame) for frame in frames]
    middle = time.process_time()
    decode = candidate.decode
    for data in encoded:
        decode(data)
    end = time.process_time()
    return (middle - start) * 1e6 / rows, (end - middle) * 1e6 / rows


def import_cost(modules: str) -> str:
    """CPU ms to import ``modules`` in a fresh interpreter (its own start-up excluded)."""
    code = f"import time; t = time.process_time(); import {modules}; print(time.process_time() - t)"
    runs = []
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if done.returncode:
            return "not installed"
        runs.append(float(done.stdout))
    return f"{min(runs) * 1000:.1f} ms"


def declared_in(package: str) -> list[str]:
    """The groups of pyproject.toml that list ``package`` ("dependencies" or an extra)."""
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    project = project["project"]
    groups = {"dependencies": project["dependencies"], **project["optional-dependencies"]}
    return [name for name, deps in groups.items() if any(d.startswith(package) for d in deps)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=20_000, help="rows per measurement")
    parser.add_argument("--sizes", default="100,1000,10000", help="rows per frame")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    total = max(args.rows, max(sizes))
    orders, payments = join_rows(total)
    workloads = {"standard": standard_rows(total), "join": None}
    gc_like_the_service()
    load = os.getloadavg()
    print(
        f"# frames: {args.rounds} rounds round robin, >= {total} rows per measurement, "
        f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {time.strftime('%Y-%m-%d %H:%M')}"
    )
    print(
        "| workload | rows/frame | encoding | encode µs/row min (median) | decode µs/row min "
        "(median) | both, median | vs today | bytes/row | exact |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for workload, rows in workloads.items():
        for size in sizes:
            if rows is None:  # a join: orders' and payments' frames alternate
                frames = [
                    f
                    for pair in zip(frames_of(orders, size), frames_of(payments, size), strict=True)
                    for f in pair
                ]
            else:
                frames = frames_of(rows, size)
            results: dict[str, Result] = {}
            for candidate in CANDIDATES:
                per_row, exact = check(candidate, frames)
                results[candidate.name] = Result([], [], per_row, exact and not candidate.lossy)
            for _ in range(args.rounds):
                for candidate in CANDIDATES:
                    enc, dec = measure(candidate, frames)
                    results[candidate.name].encode.append(enc)
                    results[candidate.name].decode.append(dec)
            base = results[CANDIDATES[0].name]
            base_both = statistics.median(map(sum, zip(base.encode, base.decode, strict=True)))
            for name, r in results.items():
                both = statistics.median(map(sum, zip(r.encode, r.decode, strict=True)))
                print(
                    f"| {workload} | {size:,} | {name} | {min(r.encode):.3f} "
                    f"({statistics.median(r.encode):.3f}) | {min(r.decode):.3f} "
                    f"({statistics.median(r.decode):.3f}) | {both:.3f} | {both / base_both:.2f} "
                    f"| {r.bytes_per_row:.1f} | {'yes' if r.exact else 'NO'} |"
                )
    print(
        f"\nimport cost (CPU, fresh interpreter, min of 3): pyarrow + pyarrow.ipc "
        f"{import_cost('pyarrow, pyarrow.ipc')}; msgpack {import_cost('msgpack')}; "
        f"orjson {import_cost('orjson')}"
    )
    for package in ("pyarrow", "msgpack", "orjson"):
        print(f"{package} in pyproject.toml: {', '.join(declared_in(package)) or 'not declared'}")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
