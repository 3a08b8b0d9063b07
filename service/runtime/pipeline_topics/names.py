"""The names of a pipeline's internal topics, consumer groups and changelog records.

Every internal name starts with ``clockwork.`` and carries the pipeline's name and its
state epoch: a reset (or a re-created name) moves the pipeline to a new epoch with a new
group, changelog and shuffle topic, so no replica still on the old epoch can write into
what the new epoch reads.

Pure, and importing nothing of the service: every layer of the runtime may read it
(``definition.py`` names a pipeline's topics with it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = [
    "INTERNAL_PREFIX",
    "META",
    "STATE",
    "changelog_topic",
    "entry_prefix",
    "epoch_suffix",
    "first_free_state_epoch",
    "group_id",
    "keyed_group_id",
    "meta_key",
    "shuffle_topic",
    "state_prefix",
]

INTERNAL_PREFIX = "clockwork."
"""Every topic and group the service names itself starts with it (the pipelines topic
too, by default), so that ACLs can grant them by prefix."""

META = "m"
STATE = "s"


def epoch_suffix(epoch: int) -> str:
    """``""`` for epoch 0 (the names before epochs existed), else ``".E<epoch>"``.

    Upper case on purpose: pipeline names are lower case, so no pipeline's own name
    can end in ``.E1`` and collide with another pipeline's epoch.
    """
    return f".E{epoch}" if epoch > 0 else ""


def group_id(name: str, epoch: int) -> str:
    """The consumer group of pipeline ``name`` in state epoch ``epoch`` (every replica
    joins it)."""
    return f"{INTERNAL_PREFIX}{name}{epoch_suffix(epoch)}"


def keyed_group_id(name: str, epoch: int) -> str:
    """The keyed stage's consumer group when the pipeline shuffles."""
    return f"{group_id(name, epoch)}.keyed"


def changelog_topic(name: str, epoch: int) -> str:
    """The changelog topic of pipeline ``name`` in state epoch ``epoch``."""
    return f"{INTERNAL_PREFIX}{name}{epoch_suffix(epoch)}.changelog"


def shuffle_topic(name: str, epoch: int) -> str:
    """The shuffle topic of pipeline ``name`` in state epoch ``epoch``."""
    return f"{INTERNAL_PREFIX}{name}{epoch_suffix(epoch)}.shuffle"


def first_free_state_epoch(name: str, topics: Iterable[str]) -> int:
    """The state epoch a pipeline created as ``name`` starts in, given the broker's topics.

    One past the newest epoch that left a changelog or shuffle topic behind, else 0. A
    deleted pipeline's changelog stays (a replica that has not followed the delete yet
    may still checkpoint to it), so a new pipeline of the same name must not reuse its
    epoch: it would inherit the old topic's partition count, which may be too narrow for
    it and, on a broker that cannot add partitions, could never be fixed.
    """
    pattern = re.compile(
        rf"{re.escape(INTERNAL_PREFIX)}{re.escape(name)}(?:\.E([1-9][0-9]*))?\.(?:changelog|shuffle)"
    )
    used = [int(m.group(1) or 0) for m in map(pattern.fullmatch, topics) if m is not None]
    return max(used) + 1 if used else 0


def entry_prefix(topic: str, partition: int) -> str:
    """What every changelog key of one stage partition starts with."""
    return f"{topic}|{partition}|"


def state_prefix(topic: str, partition: int) -> str:
    """What the changelog key of an operator state entry of a stage partition starts
    with (the entry's own name follows)."""
    return f"{topic}|{partition}|{STATE}|"


def meta_key(topic: str, partition: int) -> str:
    """The changelog key of a stage partition's checkpoint metadata (what commits it)."""
    return f"{topic}|{partition}|{META}"
