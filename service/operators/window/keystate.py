"""The state of one key of the general window operator, and its plain-data form.

(The fast operator writes a smaller form of its own, with no timers: see fast.py.)
The general operator's per-key form::

    {"contents": [[start, end, data], ...],   # by state window; an accumulator list
                                             # or a list of [timestamp, value]
     "trigger":  [[start, end, {name: value}], ...],
     "seqs":     [[start, end, next_seq], ...],
     "merging":  [[start, end, state_start, state_end], ...] or None}
"""

from __future__ import annotations

from typing import Any

from .assigners import Window

META_ENTRY = "\u0000meta"
"""The incremental-checkpoint entry holding the watermark and counters."""

KEY_PREFIX = "k"
"""Entries of keys are ``"k" + key``, so no key can collide with :data:`META_ENTRY`."""


class KeyState:
    """Windows of one key: contents by state window, trigger state and seqs by window."""

    __slots__ = ("contents", "merging", "seqs", "trigger")

    def __init__(self, merging: bool) -> None:
        self.contents: dict[Window, Any] = {}
        self.trigger: dict[Window, dict[str, Any]] = {}
        self.seqs: dict[Window, int] = {}
        self.merging: dict[Window, Window] | None = {} if merging else None

    def is_empty(self) -> bool:
        return not (self.contents or self.trigger or self.seqs or self.merging)


def copy_contents(data: Any) -> Any:
    """A copy that shares nothing mutable with the live state (values are not mutated)."""
    return [dict(x) if type(x) is dict else list(x) if type(x) is list else x for x in data]


def encode_key_state(state: KeyState) -> dict[str, Any]:
    return {
        "contents": [[w[0], w[1], copy_contents(data)] for w, data in state.contents.items()],
        "trigger": [[w[0], w[1], dict(values)] for w, values in state.trigger.items()],
        "seqs": [[w[0], w[1], seq] for w, seq in state.seqs.items()],
        "merging": None
        if state.merging is None
        else [[w[0], w[1], s[0], s[1]] for w, s in state.merging.items()],
    }


def decode_key_state(data: dict[str, Any], merging: bool) -> KeyState:
    state = KeyState(merging)
    for start, end, contents in data["contents"]:
        state.contents[(int(start), int(end))] = copy_contents(contents)
    for start, end, values in data["trigger"]:
        state.trigger[(int(start), int(end))] = dict(values)
    for start, end, seq in data["seqs"]:
        state.seqs[(int(start), int(end))] = int(seq)
    if merging:
        state.merging = {
            (int(a), int(b)): (int(c), int(d)) for a, b, c, d in data.get("merging") or []
        }
    return state


class KeyStateCodec:
    """A :class:`KeyState` as the rocksdb backend's store holds it: the checkpoint's form
    (a :class:`~service.core.state_cache.StateCodec`)."""

    __slots__ = ("merging",)

    entry_overhead_bytes = 760
    """A held :class:`KeyState` beyond its encoded size: its slots, dicts and tuples
    (measured for one window of count and sum: ~900 B in all, ~145 B encoded;
    ``tests/operators/test_held_bytes.py``)."""

    def __init__(self, merging: bool) -> None:
        self.merging = merging

    def encode(self, value: KeyState) -> dict[str, Any]:
        return encode_key_state(value)

    def decode(self, data: dict[str, Any]) -> KeyState:
        return decode_key_state(data, self.merging)
