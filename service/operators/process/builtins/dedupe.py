"""``dedupe``: forward the first occurrence of a value, drop repeats within ``ttl_ms``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from service.core.errors import ConfigError
from service.core.paths import MISSING, PathGetter, compile_path, split_path
from service.core.time import MAX_DURATION_MS, TimeDomain
from service.operators.process.builtins.params import (
    TIME_DOMAINS,
    check_int,
    check_mapping,
    check_time,
    check_unknown,
)
from service.operators.process.context import Context, Out
from service.operators.process.errors import InvalidParams
from service.operators.process.function import KeyedProcessFunction

_MISSING_MARK = [0]
"""A missing field is fingerprinted as ``[0]``, a present one as ``[1, value]``."""


@dataclass(frozen=True, slots=True)
class DedupeParams:
    """``ttl_ms`` > 0; ``fields``: dotted paths (absent: the whole value);
    ``time``: ``"event"`` (default) or ``"processing"``."""

    ttl_ms: int
    fields: tuple[str, ...] | None = None
    time: TimeDomain = TimeDomain.EVENT_TIME


class Dedupe(KeyedProcessFunction):
    """Per key, forwards a value unless the same fingerprint was forwarded less than
    ``ttl_ms`` before (record time in event time, the clock in processing time).

    The fingerprint is the canonical JSON (sorted keys) of the whole value, or of the
    listed fields (a missing field is distinct from ``null``). Map state ``seen`` holds
    ``fingerprint -> expiry``; a timer at each expiry removes the fingerprints that expired,
    so state never outlives ``ttl_ms`` past the watermark (or clock). A repeat that arrives
    after its expiry but before the timer fired is forwarded (expiry is checked on read).
    """

    NAME = "dedupe"
    PARAMS = ("fields", "ttl_ms", "time")

    def __init__(
        self,
        ttl_ms: int,
        fields: Sequence[str] | None = None,
        time: TimeDomain = TimeDomain.EVENT_TIME,
    ) -> None:
        self.ttl_ms = ttl_ms
        self.fields = tuple(fields) if fields is not None else None
        self.time = time
        self._event = time is TimeDomain.EVENT_TIME
        self._getters: tuple[PathGetter, ...] = tuple(compile_path(f) for f in self.fields or ())

    @classmethod
    def validate_params(cls, params: Mapping[str, Any]) -> list[str]:
        mapping, problems = check_mapping(params)
        problems += check_unknown(mapping, cls.PARAMS)
        check_int(mapping, "ttl_ms", problems, required=True, minimum=1, maximum=MAX_DURATION_MS)
        check_time(mapping, problems)
        if "fields" in mapping:
            fields = mapping["fields"]
            if not isinstance(fields, list) or not fields:
                problems.append("fields: must be a non-empty list of dotted paths")
            else:
                for i, field in enumerate(fields):
                    try:
                        split_path(field)
                    except ConfigError as exc:
                        problems.append(f"fields[{i}]: {exc}")
        return problems

    @classmethod
    def parse_params(cls, params: Mapping[str, Any]) -> DedupeParams:
        problems = cls.validate_params(params)
        if problems:
            raise InvalidParams(cls.NAME, problems)
        fields = params.get("fields")
        return DedupeParams(
            ttl_ms=params["ttl_ms"],
            fields=tuple(fields) if fields is not None else None,
            time=TIME_DOMAINS[params.get("time", "event")],
        )

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Dedupe:
        parsed = cls.parse_params(params)
        return cls(parsed.ttl_ms, parsed.fields, parsed.time)

    def open(self, ctx: Context) -> None:
        self._seen = ctx.map_state("seen")
        timers = ctx.timer_service
        self._register = (
            timers.register_event_time_timer
            if self._event
            else timers.register_processing_time_timer
        )

    def fingerprint(self, value: Any) -> str:
        """The canonical JSON text that identifies ``value`` for this dedupe."""
        if not self._getters:
            subject = value
        else:
            subject = []
            for getter in self._getters:
                found = getter(value)
                subject.append(_MISSING_MARK if found is MISSING else [1, found])
        return orjson.dumps(subject, option=orjson.OPT_SORT_KEYS).decode()

    def process_element(self, value: Any, ctx: Context, out: Out) -> None:
        now: int = ctx.timestamp if self._event else ctx.current_processing_time  # type: ignore[assignment]
        fingerprint = self.fingerprint(value)
        seen = self._seen
        expiry = seen.get(fingerprint)
        if expiry is not None and now < expiry:
            return
        expiry = now + self.ttl_ms
        seen.put(fingerprint, expiry)
        self._register(expiry)
        out.collect(value)

    def on_timer(self, timestamp: int, ctx: Context, out: Out) -> None:
        seen = self._seen
        for fingerprint, expiry in seen.items():
            if expiry <= timestamp:
                seen.remove(fingerprint)
