"""Top-N over a stream: the best ``n`` rows of each key, emitted as upserts of rank rows.

What Flink SQL's ``ROW_NUMBER() OVER (PARTITION BY p ORDER BY x DESC) AS rn ... WHERE
rn <= n`` is: the partition is the pipeline key (keyed as every operator is), each input
record a row, ranked by one numeric field (``order_by``), ascending or descending.

- **Append-only** (no ``row_key``; Flink's ``AppendOnlyTopNFunction``): every record is a
  row of its own. Rows are never taken back, so a row that falls out of the top ``n`` can
  never come back: a key keeps only its top ``n`` rows, and a record that does not beat
  the ``n``-th costs one comparison.
- **With a row key** (``row_key``, Flink's unique key and ``UpdatableTopNFunction``): a
  newer record of the same row replaces the older one, which may move the row up or down,
  or out of the top ``n`` (and another row in). Every row of the key is kept (the key's
  table), since a row of the top ``n`` that gets worse lets the next one in.
- **Over a table** (``table``; a table source, ``source.changelog: "upsert"``, Flink's
  ``RetractableTopNFunction`` behind a ``ChangelogNormalize``): a record is the row of its
  primary key (the record's key), ranked in the partition named by ``partition_by`` (the
  pipeline's ``key.field``, read from the value as the table aggregate reads its group;
  None: the primary key). A new version of a row replaces it, in its partition or in
  another (the retraction shuffle sends the delete of a row that moves across shuffle
  partitions); a tombstone (the value None), a row naming no partition, or one that
  cannot be ranked (dead-lettered) deletes it. A version equal to the row it replaces
  changes nothing. A partition with no rows left is forgotten once its ranks are deleted.
- **Ties** are broken by arrival: of two rows with the same value, the one that arrived
  first (its newest version, with a row key) ranks first, as Flink's. Each row version
  gets a number from one counter of the operator (checkpointed), so the order is total and
  the comparisons of the sorted list never reach the row itself.

Results (docs/pipeline-spec.md, "Top-N"): each rank of a key is one row of an upsert
stream, an :class:`~service.operators.base.Upsert` with key ``<key>|<rank>`` and result
``{"partition": key, "rank": rank, "row": row}``. **Mini-batch** as the running
aggregate's (:mod:`.running`): a record only marks its key dirty when it changes the top
``n``; once per ``emit_interval_ms`` of processing time (one tick per partition) each
dirty key compares its top ``n`` with what it emitted last and emits the ranks whose row
changed, and deletes (a tombstone) the ranks no longer held. Under exactly-once
(``emit_at_checkpoint``) that happens at the checkpoint instead; the watermark ``MAX``
(the end of bounded input) emits every dirty key. ``seq`` counts each rank row's upserts
from 0, checkpointed; a rank deleted and held again starts at 0. After a restore under
at-least-once, a key's first emission writes all its ranks, changed or not: what it
emitted after the checkpoint was lost with the crash, and a rank may have shown another
row since (a replay can end on the row the checkpoint knew, with that other row last in
the topic).

A record whose ``order_by`` value is not a number (missing, null, a string, NaN), or whose
``row_key`` is missing or null, cannot be ranked: it is dead-lettered (``bad_value``).

Checkpoints: one entry per key changed since the last one (``"p" + key``: its rows, the
row version shown at each rank and each rank's next ``seq``, whether it is dirty) and the
metadata last (the counter, the watermark).

**The rocksdb state backend** (a :class:`~service.core.state_cache.StateMaps` given): the
keys' states are the named map ``"keys"``, live :class:`_Key` objects in its cache and
plain lists in RocksDB (:class:`_KeyCodec`); over a table, each primary key's partition
is the map ``"where"``. A key's state changed in place is marked dirty right after. Which
keys are stale after a restore (above) is not a set of every restored key: each key's
stored state carries the restore *epoch* it was last fresh in (the map ``"epoch"`` counts
the restores of the store), and a key read back from an earlier one is stale.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from service.core.errors import ConfigError
from service.core.paths import MISSING, compile_path, split_path
from service.core.state_cache import StateCache, StateMaps
from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP, Clock, SystemClock
from service.operators.base import Collector, FailedRecord, InputRecord, OperatorGauges, Upsert
from service.operators.query import in_range
from service.operators.table.changes import newest_entries
from service.operators.table.table_aggregate import group_of
from service.operators.window.aggregations import encode_distinct

__all__ = [
    "DEFAULT_EMIT_INTERVAL_MS",
    "MAX_N",
    "TopNConfig",
    "TopNConfigError",
    "TopNOperator",
    "build_top_n",
]

DEFAULT_EMIT_INTERVAL_MS = 1000
MAX_N = 10_000
"""The largest ``n`` (a key emits up to ``n`` rank rows per interval)."""
SNAPSHOT_VERSION = 1
KEY_PREFIX = "p"
META_ENTRY = "\u0000meta"
REASON_BAD_VALUE = "bad_value"
HEADER_FIELD = "clockwork.field"
HEADER_FUNCTION = "clockwork.function"

Row = tuple[Any, ...]
"""``(sort value, version, event timestamp, value, row key)``: the sort value is the
``order_by`` value, negated when descending, so every list sorts ascending; the version
(the operator's counter) is unique, so comparisons never go past it."""
_SORT, _VERSION, _TS, _VALUE, _ROW_KEY = range(5)


class TopNConfigError(ConfigError):
    """A Top-N operator built with invalid parameters (a spec's are the rules' to refuse)."""


class TopNStateError(RuntimeError):
    """A snapshot this operator cannot read."""


@dataclass(frozen=True, slots=True)
class TopNConfig:
    """Everything a Top-N operator needs; checked here, once."""

    pipeline: str
    order_by: str
    """The dotted path of the numeric field rows are ranked by."""
    n: int
    desc: bool = True
    row_key: str | None = None
    """The dotted path naming a row: a newer record of a row replaces it. None: every
    record is a row (append-only)."""
    emit_interval_ms: int = DEFAULT_EMIT_INTERVAL_MS
    emit_at_checkpoint: bool = False
    """Exactly-once delivery: dirty keys are emitted at the checkpoint, not per tick."""
    clock: Clock = field(default_factory=SystemClock)
    table: bool = False
    """Over a table source: records are rows keyed by their primary key, replaced by a
    newer version and deleted by the value None (module docstring)."""
    partition_by: str | None = None
    """Over a table: the dotted path of the partition in a row (None: the primary key)."""
    state_maps: StateMaps | None = None
    """The rocksdb state backend: the keys (and over a table, the rows' partitions) in
    the named maps this makes; None: in dicts (the memory backend)."""

    def __post_init__(self) -> None:
        if self.table and self.row_key is not None:
            raise TopNConfigError("over a table the primary key names a row: no row_key")
        if self.partition_by is not None and not self.table:
            raise TopNConfigError("partition_by is for a Top-N over a table")
        if type(self.n) is not int or not 1 <= self.n <= MAX_N:
            raise TopNConfigError(f"n must be an int from 1 to {MAX_N}, not {self.n!r}")
        interval = self.emit_interval_ms
        if type(interval) is not int or interval <= 0:
            raise TopNConfigError(f"emit_interval_ms must be an int > 0, not {interval!r}")
        try:
            split_path(self.order_by)
            if self.row_key is not None:
                split_path(self.row_key)
            if self.partition_by is not None:
                split_path(self.partition_by)
        except ConfigError as exc:
            raise TopNConfigError(str(exc)) from exc


def build_top_n(
    pipeline: str,
    operator_spec: Mapping[str, Any],
    clock: Clock,
    *,
    emit_at_checkpoint: bool = False,
    table: bool = False,
    partition_by: str | None = None,
    state_maps: StateMaps | None = None,
) -> TopNOperator:
    """A Top-N operator from the spec's ``"operator"`` object (``"type": "top_n"``);
    ``table``: over a table source, partitioned by ``partition_by`` (None: the primary
    key); ``state_maps``: the rocksdb state backend's (None: memory)."""
    kind = operator_spec.get("type")
    if kind != "top_n":
        raise TopNConfigError(f"not a Top-N operator: type {kind!r}")
    order = operator_spec.get("order_by")
    if not isinstance(order, Mapping):
        raise TopNConfigError("order_by must be an object {field, desc}")
    return TopNOperator(
        TopNConfig(
            pipeline=pipeline,
            order_by=order.get("field"),  # type: ignore[arg-type]  # checked by the config
            desc=bool(order.get("desc", True)),
            n=operator_spec.get("n"),  # type: ignore[arg-type]
            row_key=operator_spec.get("row_key"),
            emit_interval_ms=operator_spec.get("emit_interval_ms", DEFAULT_EMIT_INTERVAL_MS),
            emit_at_checkpoint=emit_at_checkpoint,
            clock=clock,
            table=table,
            partition_by=partition_by,
            state_maps=state_maps,
        )
    )


class _Key:
    """One key's rows and what it emitted last."""

    __slots__ = ("by_row", "rows", "seqs", "shown", "stale", "ts")

    def __init__(self, keyed: bool) -> None:
        self.rows: list[Row] = []
        """Sorted best first: the top ``n`` (append-only), or every row (a row key)."""
        self.by_row: dict[str, Row] | None = {} if keyed else None
        """With a row key: each row's current version."""
        self.shown: list[int] = []
        """The version emitted last at each rank (index 0: rank 1)."""
        self.seqs: list[int] = []
        """Each shown rank's next ``seq``."""
        self.ts = MIN_TIMESTAMP
        """The largest event timestamp of a row the key took in (a delete's timestamp)."""
        self.stale = False
        """At least once, after a restore: its next emission writes every rank (what it
        emitted after the checkpoint, lost with the crash and replayed now, is not known:
        a rank may have shown another row since, and be back to the one the checkpoint
        knew)."""


def _key_state(entry: Mapping[str, Any], keyed: bool) -> _Key:
    """A key's state from its checkpoint entry (:meth:`TopNOperator._entry`'s layout)."""
    state = _Key(keyed)
    state.rows = [tuple(row) for row in entry["rows"]]
    if state.by_row is not None:
        state.by_row = {row[_ROW_KEY]: row for row in state.rows}
    state.shown = [int(v) for v in entry["shown"]]
    state.seqs = [int(s) for s in entry["seqs"]]
    state.ts = int(entry["ts"])
    return state


class _KeyCodec:
    """A key's state to and from RocksDB (a :class:`~service.core.state_cache.StateCodec`):
    its checkpoint entry's layout, with the restore epoch it was last fresh in (-1: it is
    stale)."""

    __slots__ = ("epoch", "keyed", "stale_after_restore")

    def __init__(self, keyed: bool, stale_after_restore: bool) -> None:
        self.keyed = keyed
        self.stale_after_restore = stale_after_restore
        self.epoch = 0
        """The store's restores so far (this run's)."""

    def encode(self, state: _Key) -> dict[str, Any]:
        return {
            "rows": state.rows,  # tuples: JSON arrays (written before the next change)
            "shown": state.shown,
            "seqs": state.seqs,
            "ts": state.ts,
            "epoch": -1 if state.stale else self.epoch,
        }

    def decode(self, data: dict[str, Any]) -> _Key:
        state = _key_state(data, self.keyed)
        state.stale = self.stale_after_restore and data["epoch"] < self.epoch
        return state


class TopNOperator:
    """One partition's Top-N (module docstring)."""

    __slots__ = (
        "_at_checkpoint",
        "_changed",
        "_clock",
        "_codec",
        "_desc",
        "_epochs",
        "_get_order",
        "_get_partition",
        "_get_row_key",
        "_interval",
        "_keys",
        "_n",
        "_next_tick",
        "_order_field",
        "_pending",
        "_prefix",
        "_row_key_field",
        "_table",
        "_ticks",
        "_version",
        "_watermark",
        "_where",
        "collector",
    )

    def __init__(self, config: TopNConfig) -> None:
        self.collector = Collector()
        self._clock = config.clock
        self._n = config.n
        self._desc = config.desc
        self._interval = config.emit_interval_ms
        self._at_checkpoint = config.emit_at_checkpoint
        self._prefix = f"{config.pipeline}|"
        self._order_field = config.order_by
        self._get_order = compile_path(config.order_by)
        self._row_key_field = config.row_key
        self._get_row_key = compile_path(config.row_key) if config.row_key is not None else None
        self._table = config.table
        part = config.partition_by
        self._get_partition = compile_path(part) if part is not None else None
        maps = config.state_maps
        keyed = self._get_row_key is not None or self._table
        self._codec: _KeyCodec | None = None
        self._epochs: StateCache | None = None
        self._where: dict[str, str]
        """Over a table: each primary key's partition (its row is in that key's state)."""
        self._keys: dict[str, _Key]
        """Key -> its state: a dict, or with the rocksdb backend a
        :class:`~service.core.state_cache.StateCache` (typed as the dict it stands for)."""
        if maps is None:
            self._where = {}
            self._keys = {}
        else:
            self._codec = _KeyCodec(keyed, not config.emit_at_checkpoint)
            self._keys = cast(dict[str, _Key], maps("keys", self._codec))
            self._where = cast(dict[str, str], maps("where")) if self._table else {}
            self._epochs = maps("epoch")
            self._codec.epoch = self._epochs.get("epoch", 0)
        self._pending: dict[str, None] = {}
        """The dirty keys, in the order they became dirty (an ordered set)."""
        self._changed: set[str] = set()
        """Keys emitted or changed below the top n since the last checkpoint (besides the
        dirty)."""
        self._version = 0
        """The next row version (ties rank by it: arrival order)."""
        self._next_tick: int | None = None
        self._ticks = [0, 0]
        self._watermark = MIN_TIMESTAMP

    # -- the batch loop ------------------------------------------------------------------
    def process_batch(self, records: Sequence[InputRecord]) -> None:
        if self._table:
            self._table_rows(records)
        elif self._get_row_key is None:
            self._append_only(records)
        else:
            self._updating(records)
        if self._next_tick is None and self._pending and not self._at_checkpoint:
            self._next_tick = self._clock.now_ms() + self._interval
            self._ticks[0] += 1

    def _append_only(self, records: Sequence[InputRecord]) -> None:
        keys = self._keys
        mark = self._mark()
        pending = self._pending
        get = self._get_order
        n = self._n
        sign = -1 if self._desc else 1
        version = self._version
        for record in records:
            key, ts, value, _position, _source = record
            v = get(value)
            kind = type(v)
            if (kind is not int and kind is not float) or v != v:
                self._reject(record, self._order_field, v)
                continue
            sort = sign * v
            state = keys.get(key)
            if state is None:
                state = keys[key] = _Key(False)
            rows = state.rows
            if len(rows) >= n and sort >= rows[-1][_SORT]:
                continue  # not better than the n-th: a tie ranks after it
            if ts > state.ts:
                state.ts = ts
            row = (sort, version, ts, value, None)
            version += 1
            rows.insert(bisect_right(rows, row), row)
            if len(rows) > n:
                rows.pop()
            if mark is not None:
                mark(key)
            pending[key] = None
        self._version = version

    def _updating(self, records: Sequence[InputRecord]) -> None:
        keys = self._keys
        mark = self._mark()
        pending = self._pending
        get = self._get_order
        changed = self._changed
        get_row = self._get_row_key
        if get_row is None:  # append-only: process_batch calls the other loop
            return
        n = self._n
        sign = -1 if self._desc else 1
        version = self._version
        for record in records:
            key, ts, value, _position, _source = record
            v = get(value)
            kind = type(v)
            if (kind is not int and kind is not float) or v != v:
                self._reject(record, self._order_field, v)
                continue
            name = get_row(value)
            if name is MISSING or name is None:
                self._reject(record, self._row_key_field or "", name)
                continue
            row_key = name if type(name) is str else str(name)
            state = keys.get(key)
            if state is None:
                state = keys[key] = _Key(True)
            if ts > state.ts:
                state.ts = ts
            rows = state.rows
            by_row: dict[str, Row] = state.by_row  # type: ignore[assignment]
            row = (sign * v, version, ts, value, row_key)
            version += 1
            old = by_row.get(row_key)
            dirty = False
            if old is not None:
                at = bisect_left(rows, old)
                del rows[at]
                dirty = at < n
            at = bisect_right(rows, row)
            rows.insert(at, row)
            by_row[row_key] = row
            if mark is not None:
                mark(key)
            if dirty or at < n:
                pending[key] = None
            else:
                changed.add(key)  # below the top n: checkpointed, not emitted
        self._version = version

    def _table_rows(self, records: Sequence[InputRecord]) -> None:
        """A table's versions: each takes its row's old version out of its partition
        (marking the partition dirty when it was in the top n) and ranks the new one in
        its own (a tombstone, a row naming no partition or one that cannot be ranked: no
        new one)."""
        keys = self._keys
        mark = self._mark()
        pending = self._pending
        changed = self._changed
        where = self._where
        get = self._get_order
        part = self._get_partition
        n = self._n
        sign = -1 if self._desc else 1
        version = self._version
        for record in records:
            pk, ts, value, _position, _source = record
            partition: str | None = None
            v: Any = None
            if value is not None:
                v = get(value)
                kind = type(v)
                if (kind is not int and kind is not float) or v != v:
                    self._reject(record, self._order_field, v)  # the row is deleted
                else:
                    partition = pk if part is None else group_of(value, part)
            before = where.get(pk)
            if before is not None:
                state = keys[before]
                by_row: dict[str, Row] = state.by_row  # type: ignore[assignment]
                old = by_row[pk]
                if (
                    partition == before
                    and old[_VALUE] == value
                    and encode_distinct(old[_VALUE]) == encode_distinct(value)
                ):
                    continue  # the same row (as JSON: 1 is not 1.0, nor True)
                rows = state.rows
                at = bisect_left(rows, old)
                del rows[at], by_row[pk], where[pk]
                if ts > state.ts:
                    state.ts = ts
                if mark is not None:
                    mark(before)
                if at < n:
                    pending[before] = None
                else:
                    changed.add(before)  # below the top n: checkpointed, not emitted
            if partition is None:
                continue
            into = keys.get(partition)
            if into is None:
                into = keys[partition] = _Key(True)
            if ts > into.ts:
                into.ts = ts
            row = (sign * v, version, ts, value, pk)
            version += 1
            rows = into.rows
            at = bisect_right(rows, row)
            rows.insert(at, row)
            into.by_row[pk] = row  # type: ignore[index]
            if mark is not None:
                mark(partition)
            where[pk] = partition
            if at < n:
                pending[partition] = None
            else:
                changed.add(partition)
        self._version = version

    def _mark(self) -> Callable[[str], None] | None:
        """With the rocksdb backend, the keys' cache's ``mark_dirty`` (a key's state
        changed in place is marked right after); None with dicts."""
        keys = self._keys
        return None if type(keys) is dict else cast(StateCache, keys).mark_dirty

    def _reject(self, record: InputRecord, path: str, found: Any) -> None:
        """Dead-letter a record that cannot be ranked, counted as a bad value of ``path``
        (``not_a_number``: its order value; ``missing``: its row key)."""
        key, _ts, _value, _position, source = record
        if found is MISSING or found is None:
            what = "missing" if found is MISSING else "null"
        elif isinstance(found, bool):
            what = "a boolean"
        elif isinstance(found, str):
            what = f"a string ({found[:40]!r})"
        elif isinstance(found, float):
            what = "NaN"
        else:
            what = f"a {type(found).__name__}"
        reason = "missing" if path == self._row_key_field else "not_a_number"
        counts = self.collector.bad_values
        entry = (path, reason)
        counts[entry] = counts.get(entry, 0) + 1
        self.collector.failed.append(
            FailedRecord(
                source,
                key,
                REASON_BAD_VALUE,
                f"top_n cannot rank a row by {path}: {what}",
                ((HEADER_FIELD, path.encode()), (HEADER_FUNCTION, b"top_n")),
            )
        )

    # -- time ----------------------------------------------------------------------------
    @property
    def current_watermark(self) -> int:
        return self._watermark

    def advance_watermark(self, watermark: int) -> None:
        """Event time changes no ranking; the end of input (``MAX``) emits every dirty key."""
        if watermark > self._watermark:
            self._watermark = watermark
            if watermark == MAX_TIMESTAMP:
                self._emit_pending()

    def advance_processing_time(self, now: int) -> None:
        tick = self._next_tick
        if tick is None or now < tick:
            return
        self._next_tick = None
        self._ticks[1] += 1
        if not self._at_checkpoint:
            self._emit_pending()

    def next_processing_time(self) -> int | None:
        return self._next_tick

    def before_checkpoint(self) -> None:
        """Under exactly-once, the dirty keys are emitted here, into the checkpoint's
        transaction (:class:`~service.operators.base.EmitsAtCheckpoint`)."""
        if self._at_checkpoint:
            self._emit_pending()

    # -- emitting ------------------------------------------------------------------------
    def _emit_pending(self) -> None:
        pending = self._pending
        if not pending:
            return
        append = self.collector.results.append
        prefix = self._prefix
        n = self._n
        keys = self._keys
        mark = self._mark()
        for key in pending:
            state = keys[key]
            rows, shown, seqs = state.rows, state.shown, state.seqs
            held = min(len(rows), n)
            again = state.stale
            if again:
                state.stale = False
            for i in range(held):
                row = rows[i]
                version = row[_VERSION]
                if i < len(shown):
                    if shown[i] == version and not again:
                        continue
                    shown[i] = version
                else:
                    shown.append(version)
                    seqs.append(0)
                seq = seqs[i]
                seqs[i] = seq + 1
                rank = i + 1
                name = f"{key}|{rank}"
                result = {"partition": key, "rank": rank, "row": row[_VALUE]}
                append(Upsert(prefix + name, name, result, seq, row[_TS]))
            for i in range(len(shown) - 1, held - 1, -1):  # ranks no longer held
                name = f"{key}|{i + 1}"
                append(Upsert(prefix + name, name, None, seqs[i], state.ts))
                del shown[i], seqs[i]
            if not rows:  # a table's partition with no rows left: its ranks deleted
                del keys[key]
            elif mark is not None:
                mark(key)
        self._changed.update(pending)
        pending.clear()

    # -- metrics -------------------------------------------------------------------------
    def gauges(self) -> OperatorGauges:
        return OperatorGauges(
            event_timers=0,
            processing_timers=0 if self._next_tick is None else 1,
            windows_open=0,
            keys=len(self._keys),
        )

    def timer_counts(self) -> dict[str, tuple[int, int, int]]:
        return {"event": (0, 0, 0), "processing": (self._ticks[0], self._ticks[1], 0)}

    def stats(self) -> dict[str, Any]:
        rows = sum(len(state.rows) for _, state in self._keys.items())
        return {"keys": len(self._keys), "rows": rows}

    # -- pull queries (operators/query.py) ------------------------------------------------
    query_kind = "top_n"

    def query_key(self, key: str) -> dict[str, Any] | None:
        """The partition key's ranks now, best first (emitted or not)."""
        state = self._keys.get(key)
        if state is None or not state.rows:
            return None
        return {
            "ranks": [
                {"rank": i + 1, "row": row[_VALUE], "timestamp": row[_TS]}
                for i, row in enumerate(state.rows[: self._n])
            ]
        }

    def scan(
        self, from_key: str | None, to_key: str | None, limit: int
    ) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        for key in sorted(key for key in self._keys if in_range(key, from_key, to_key)):
            if len(out) >= limit:
                break
            found = self.query_key(key)
            if found is not None:
                out.append((key, found))
        return out

    # -- checkpoints ---------------------------------------------------------------------
    def _entry(self, key: str) -> dict[str, Any] | None:
        state = self._keys.get(key)
        if state is None:
            return None
        return {
            "rows": [list(row) for row in state.rows],
            "shown": list(state.shown),
            "seqs": list(state.seqs),
            "ts": state.ts,
            "dirty": key in self._pending,
        }

    def _meta(self) -> dict[str, Any]:
        return {"version": SNAPSHOT_VERSION, "watermark": self._watermark, "next": self._version}

    def snapshot(self) -> dict[str, Any]:
        return {
            "version": SNAPSHOT_VERSION,
            "meta": self._meta(),
            "keys": {key: self._entry(key) for key in self._keys},
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        if snapshot.get("version") != SNAPSHOT_VERSION:
            raise TopNStateError(f"unknown Top-N snapshot version {snapshot.get('version')!r}")
        self._load(snapshot["meta"], list(snapshot["keys"].items()))

    def snapshot_changes(self) -> dict[str, Any]:
        changed = self._changed
        changed.update(self._pending)
        changes: dict[str, Any] = {KEY_PREFIX + key: self._entry(key) for key in changed}
        changed.clear()
        changes[META_ENTRY] = self._meta()
        return changes

    def restore_changes(self, entries: Iterable[tuple[str, Any]]) -> None:
        meta, keys = newest_entries(entries, KEY_PREFIX, META_ENTRY, TopNStateError)
        self._load(meta, keys, whole=False)

    def _apply_onto_store(self, keys: list[tuple[str, Any]], whole: bool) -> None:
        """The rocksdb backend's restore: the maps emptied first (``whole``), a new epoch
        if they hold keys (every key stored before it is stale, under at-least-once),
        then each entry applied onto them, the rows' partitions moved with them."""
        codec = self._codec
        epochs = self._epochs
        assert codec is not None and epochs is not None
        cache = self._keys
        where = self._where
        if whole:
            cache.clear()
            where.clear()
        if len(cache):  # (a store with no key has none to make stale: nothing written)
            codec.epoch += 1
            epochs["epoch"] = codec.epoch
        keyed = self._get_row_key is not None or self._table
        for key, entry in keys:
            old = cache.pop(key, None)
            if self._table and old is not None:  # its rows that left: nowhere now
                for pk in old.by_row:  # type: ignore[union-attr]
                    if where.get(pk) == key:
                        del where[pk]
            if entry is None:
                continue
            state = _key_state(entry, keyed)
            state.stale = not self._at_checkpoint
            cache[key] = state
            if self._table:
                for pk in state.by_row:  # type: ignore[union-attr]
                    where[pk] = key
            if entry["dirty"]:
                self._pending[key] = None

    def state_maps(self) -> list[StateCache]:
        """The rocksdb backend's named maps (the runtime flushes them at each checkpoint)."""
        if self._epochs is None:
            return []
        maps = [cast(StateCache, self._keys), self._epochs]
        if self._table:
            maps.append(cast(StateCache, self._where))
        return maps

    def _load(
        self, meta: dict[str, Any] | None, keys: list[tuple[str, Any]], whole: bool = True
    ) -> None:
        """Restore from checkpoint entries: the whole state (``whole``), or with the
        rocksdb backend the changelog's entries after the checkpoint its store holds,
        applied onto it (:meth:`_apply_onto_store`)."""
        if meta is not None:
            if meta.get("version") != SNAPSHOT_VERSION:
                raise TopNStateError(f"unknown Top-N checkpoint version {meta.get('version')!r}")
            self._watermark = int(meta["watermark"])
            self._version = int(meta["next"])
        self._pending.clear()
        self._changed.clear()
        if self._codec is not None:
            self._apply_onto_store(keys, whole)
        else:
            self._keys.clear()
            self._where.clear()
            keyed = self._get_row_key is not None or self._table
            for key, entry in keys:
                if entry is None:
                    continue
                state = _key_state(entry, keyed)
                if self._table:
                    self._where.update((pk, key) for pk in state.by_row)  # type: ignore[union-attr]
                # what it emitted after the checkpoint is unknown
                state.stale = not self._at_checkpoint
                self._keys[key] = state
                if entry["dirty"]:
                    self._pending[key] = None
        self._next_tick = None
        if self._pending and not self._at_checkpoint:
            self._next_tick = self._clock.now_ms() + self._interval
            self._ticks[0] += 1
