"""A standby's copy of a partition (consumer_group/standby.py) fed changelog records by
hand, no broker: only committed checkpoints reach its RocksDB store, and the local
checkpoint it writes names where the last checkpoint applied begins (as the owner's own
file does: a restore reads that checkpoint again, the operator's metadata entry with it),
over exactly the state the owner had checkpointed there."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson
from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry

from service.core.state_cache import NamespacedStore
from service.core.time import ManualClock
from service.operators.base import AppliesChanges, Operator
from service.operators.table.running import META_ENTRY
from service.pipeline_spec.build import build_definition
from service.pipeline_spec.models import validate_spec
from service.runtime.consumer_group.changelog import encode_checkpoint
from service.runtime.consumer_group.local_state import LocalStates, process_memory
from service.runtime.consumer_group.stages import KeyedStage
from service.runtime.consumer_group.standby import Standbys
from service.runtime.definition import PipelineDefinition, StateSettings
from service.runtime.observability.metrics import RuntimeMetrics, build_metrics
from service.runtime.partition.rocksdb_store import open_store
from service.runtime.settings import RuntimeSettings

TP = TopicPartition("in", 0)
OWNED = TopicPartition("in", 1)


def definition() -> PipelineDefinition:
    spec = {
        "name": "copy",
        "source": {"topics": ["in"]},
        "key": {"field": "user"},
        "operator": {
            "type": "aggregate",
            "aggregations": {"n": {"fn": "count"}, "total": {"fn": "sum", "field": "amount"}},
        },
        "sink": {"topic": "out"},
    }
    built = build_definition(validate_spec(spec, ()), ())
    return replace(built, state=StateSettings("rocksdb", cache_bytes=4000, standby_replicas=1))


@dataclass
class CopySession:
    """What the standbys read of their session."""

    definition: PipelineDefinition
    settings: RuntimeSettings
    metrics: RuntimeMetrics
    stage: KeyedStage
    clock: ManualClock
    name: str = "copy"
    decoder: Any = None

    def batches_for(self, tp: TopicPartition) -> Any:
        raise AssertionError("a standby never writes to Kafka")


class Changelog:
    """The owner's side: its operator, and the changelog records its checkpoints write."""

    def __init__(self, owner: Operator, standbys: Standbys) -> None:
        self.owner = owner
        self.standbys = standbys
        self.offset = 0
        self.metas: list[int] = []
        self.firsts: list[int] = []
        """The offset of each checkpoint's first record."""
        self.log: list[tuple[int, bytes, bytes | None]] = []
        """Every record: its offset, key and value."""

    def record(self, key: str, value: Any) -> None:
        data = None if value is None else orjson.dumps(value)
        self.log.append((self.offset, key.encode(), data))
        self.standbys.apply(self.offset, key.encode(), data)
        self.offset += 1

    def checkpoint(self, users: list[str], source_offset: int, cut_short: bool = False) -> None:
        rows = [(u, 0, {"user": u, "amount": len(u)}, i, None) for i, u in enumerate(users)]
        self.owner.process_batch(rows)
        records = encode_checkpoint(
            TP, self.owner.snapshot_changes().items(), {"offset": source_offset}
        )
        if cut_short:  # the owner died before its metadata record
            records = records[:-1]
        self.firsts.append(self.offset)
        for key, value in records:
            if key.endswith(b"|m"):
                self.metas.append(self.offset)
            self.log.append((self.offset, key, value))
            self.standbys.apply(self.offset, key, value)
            self.offset += 1

    def accs(self) -> dict[str, Any]:
        keys = self.owner.snapshot()["keys"]
        return {key: orjson.loads(orjson.dumps(entry["acc"])) for key, entry in keys.items()}


async def test_a_copy_holds_the_owner_s_last_committed_checkpoint(tmp_path: Path) -> None:
    built = definition()
    clock = ManualClock(0)
    session = CopySession(
        built,
        RuntimeSettings("unused:9092", member="me"),
        build_metrics(CollectorRegistry()),
        KeyedStage(built),
        clock,
    )
    standbys = Standbys(session, tmp_path, built.changelog_topic, 1)
    standbys.assignor.standby = {TP, OWNED}
    assert standbys.open_copies([OWNED]) == {0: 0}  # never a copy of its own; read from 0
    changelog = Changelog(built.operator_factory(clock), standbys)
    users = [f"u{i}" for i in range(40)]
    changelog.checkpoint(users, 40)
    changelog.record("in|1|s|k:u1", [9])  # another partition's: not this copy's
    changelog.record("other|0|m", {"offset": 5})
    changelog.checkpoint([*users[:10], "late"], 51)
    committed = changelog.accs()
    changelog.checkpoint(["cut", "u3"], 53, cut_short=True)
    (status,) = standbys.status()
    assert (status.position, status.offset, status.keys) == (changelog.metas[-1], 51, 41)
    await standbys.stop()
    store, checkpoint = open_store(tmp_path / built.changelog_topic / "in-0", process_memory())
    try:
        assert checkpoint is not None
        # The last committed checkpoint's first record (the cut-short one's is later).
        assert changelog.firsts[-2] < changelog.metas[-1] < changelog.firsts[-1]
        assert (checkpoint.position, checkpoint.counts) == (changelog.firsts[-2], {"keys": 41})
        assert dict(NamespacedStore(store, "keys").items()) == committed
    finally:
        store.close()


async def test_a_restore_from_a_copy_s_checkpoint_reads_the_operator_s_metadata(
    tmp_path: Path,
) -> None:
    """The operator's metadata entry (its watermark, its invalid values' counts) is in the
    changelog only, not in the store: the restore's tail must hold it."""
    built = definition()
    clock = ManualClock(0)
    session = CopySession(
        built,
        RuntimeSettings("unused:9092", member="me"),
        build_metrics(CollectorRegistry()),
        KeyedStage(built),
        clock,
    )
    standbys = Standbys(session, tmp_path, built.changelog_topic, 1)
    standbys.assignor.standby = {TP}
    standbys.open_copies([])
    changelog = Changelog(built.operator_factory(clock), standbys)
    changelog.checkpoint([f"u{i}" for i in range(40)], 40)
    changelog.checkpoint(["u1", "late"], 42)
    committed = changelog.accs()
    await standbys.stop()
    store, checkpoint = open_store(tmp_path / built.changelog_topic / "in-0", process_memory())
    store.close()
    assert checkpoint is not None
    # What a local restore reads of the changelog: from the file's position to the end.
    tail = [
        (key.decode().split("|", 3)[3], None if value is None else orjson.loads(value))
        for offset, key, value in changelog.log
        if offset >= checkpoint.position and key.startswith(b"in|0|s|")
    ]
    assert [name for name, _ in tail].count(META_ENTRY) == 1
    owner = LocalStates(tmp_path, built.changelog_topic, 4000)
    local = owner.open(TP)
    try:
        operator = built.operator_factory.with_state(clock, local.state_map)
        assert isinstance(operator, AppliesChanges)
        operator.apply_changes(tail)
        restored = {
            key: orjson.loads(orjson.dumps(entry["acc"]))
            for key, entry in operator.snapshot()["keys"].items()
        }
        assert restored == committed
    finally:
        owner.close([TP])
