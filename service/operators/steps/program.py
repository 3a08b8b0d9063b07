"""A pipeline's ``steps`` compiled into one function per run of steps between unnests.

Steps (docs/pipeline-spec.md, "Steps"), applied in order to each decoded record before
its key and timestamp are taken:

- ``{"filter": expr}``: keep the record when ``expr`` is TRUE (NULL and FALSE drop it);
- ``{"set": {path: expr, ...}}``: every expression reads the record as it was before the
  step (SQL's SELECT), then each result is written at its dotted path;
- ``{"select": [path, ...]}`` / ``{"drop": [path, ...]}``: projection;
- ``{"unnest": path, "as": path}``: one record per element of the array at ``path``,
  with the element at ``as`` (a missing or NULL array gives none, like CROSS JOIN UNNEST).

Steps without an unnest compile into one straight-line function ``run(value)`` that
returns the record or None (filtered out); every expression of every step is inlined
into it (compiler.py), so a record costs one call. With an unnest, the runs of steps
between unnests are such functions, and :meth:`StepProgram.run_many` loops over the
records each unnest makes.

The decoded payload is modified in place (it is the pipeline's own copy); an unnested
record is a shallow copy of its parent, so a write below the top level copies the dicts
on its way first and records never share a changed dict.

A failing expression raises :class:`StepFailed` with the step's index and the message:
the runtime sends that record to the dead-letter topic (``step_failed``) and goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.core.paths import split_path

from .compiler import (
    GENERATED_BUILTINS,
    HELPERS,
    Reads,
    _Names,
    as_defaults,
    compile_expression,
)
from .errors import EvalError, ExpressionError, StepFailed
from .values import kind

MAX_OUTPUTS = 1 << 20
"""Records one input may become (the element index is 20 bits of a shuffle position)."""

STEP_KINDS = ("filter", "set", "select", "drop", "unnest")

RunOne = Callable[[dict[str, Any]], dict[str, Any] | None]


class StepsConfigError(ValueError):
    """Steps that cannot be compiled: ``problems`` are ``(json path, message)`` pairs."""

    def __init__(self, problems: list[tuple[tuple[str | int, ...], str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{'.'.join(map(str, p))}: {m}" for p, m in problems))


def step_kind(step: Mapping[str, Any]) -> str | None:
    """Which kind of step ``step`` is (its first key naming one), or None."""
    for key in step:
        if key in STEP_KINDS:
            return str(key)
    return None


@dataclass(frozen=True, slots=True)
class Unnest:
    index: int
    path: tuple[str, ...]
    target: tuple[str, ...]


# -- writes below the top level (copy on write) ------------------------------------------
def put_path(record: dict[str, Any], parts: tuple[str, ...], value: Any) -> None:
    """Write ``value`` at ``parts``, copying the dicts on the way (a missing or NULL one
    becomes an empty object; any other value there is an error)."""
    node = record
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = {}
        elif type(child) is dict:
            child = dict(child)
        else:
            raise EvalError(f"cannot set a field inside {part!r}: it is {kind(child)}")
        node[part] = child
        node = child
    node[parts[-1]] = value


def drop_path(record: dict[str, Any], parts: tuple[str, ...]) -> None:
    """Remove the field at ``parts`` if it is there (copying the dicts on the way)."""
    node = record
    for part in parts[:-1]:
        child = node.get(part)
        if type(child) is not dict:
            return
        child = dict(child)
        node[part] = child
        node = child
    node.pop(parts[-1], None)


_ABSENT = object()


def select_path(record: dict[str, Any], out: dict[str, Any], parts: tuple[str, ...]) -> None:
    """Copy the field at ``parts`` of ``record`` into ``out`` (nothing if missing)."""
    node: Any = record
    for part in parts:
        if type(node) is not dict:
            return
        node = node.get(part, _ABSENT)
        if node is _ABSENT:
            return
    target = out
    for part in parts[:-1]:
        child = target.get(part)
        if type(child) is not dict:
            child = target[part] = {}
        target = child
    target[parts[-1]] = node


def select_paths(record: dict[str, Any], paths: tuple[tuple[str, ...], ...]) -> dict[str, Any]:
    """A new record with only the fields at ``paths`` (those that are there)."""
    out: dict[str, Any] = {}
    for parts in paths:
        select_path(record, out, parts)
    return out


class StepProgram:
    """A pipeline's steps, compiled (see the module docstring)."""

    __slots__ = ("has_unnest", "run_one", "segments", "source", "steps")

    def __init__(self, steps: Sequence[Mapping[str, Any]]) -> None:
        self.steps = [dict(step) for step in steps]
        names = _Names()
        problems: list[tuple[tuple[str | int, ...], str]] = []
        segments: list[RunOne | Unnest] = []
        sources: list[str] = []
        pending: list[tuple[int, Mapping[str, Any]]] = []

        def flush() -> None:
            if pending:
                function, source = _compile_run(pending, names, problems)
                segments.append(function)
                sources.append(source)
                pending.clear()

        for index, step in enumerate(self.steps):
            which = step_kind(step)
            if which == "unnest":
                flush()
                try:
                    segments.append(
                        Unnest(index, split_path(step["unnest"]), split_path(step["as"]))
                    )
                except (KeyError, ValueError, TypeError) as exc:
                    problems.append((("steps", index), f"invalid unnest: {exc}"))
            elif which is None:
                problems.append((("steps", index), f"a step is one of {', '.join(STEP_KINDS)}"))
            else:
                pending.append((index, step))
        flush()
        if problems:
            raise StepsConfigError(problems)
        self.segments = segments
        self.source = "\n".join(sources)
        """The generated Python (for tests and the curious)."""
        self.has_unnest = any(isinstance(s, Unnest) for s in segments)
        only = segments[0] if len(segments) == 1 else None
        self.run_one: RunOne | None = (
            only if only is not None and not isinstance(only, Unnest) else None
        )
        """Set when there is no unnest: ``run_one(value)`` -> the record or None."""

    def __len__(self) -> int:
        return len(self.steps)

    def run_many(self, value: dict[str, Any]) -> list[dict[str, Any]]:
        """Every record ``value`` becomes, in order (with or without unnest)."""
        records = [value]
        for segment in self.segments:
            if isinstance(segment, Unnest):
                records = _unnest(segment, records)
            else:
                records = [r for r in map(segment, records) if r is not None]
            if not records:
                break
        return records


def _unnest(step: Unnest, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    path, target = step.path, step.target
    for record in records:
        array: Any = record
        for part in path:
            array = array.get(part) if type(array) is dict else None
        if array is None:
            continue
        if type(array) is not list:
            raise StepFailed(step.index, f"unnest {'.'.join(path)!r}: {kind(array)} is not ARRAY")
        if len(out) + len(array) > MAX_OUTPUTS:
            raise StepFailed(step.index, f"unnest makes more than {MAX_OUTPUTS} records")
        for element in array:
            copy = dict(record)
            try:
                put_path(copy, target, element)
            except EvalError as exc:
                raise StepFailed(step.index, str(exc)) from None
            out.append(copy)
    return out


def _failure(index: int, exc: Exception) -> StepFailed:
    """A step's exception as the dead letter's message."""
    if isinstance(exc, EvalError):
        return StepFailed(index, str(exc))
    return StepFailed(index, f"{type(exc).__name__}: {exc}"[:500])


def _compile_run(
    steps: list[tuple[int, Mapping[str, Any]]],
    names: _Names,
    problems: list[tuple[tuple[str | int, ...], str]],
) -> tuple[RunOne, str]:
    """One function for consecutive non-unnest steps; problems are appended."""
    namespace: dict[str, Any] = {
        "__builtins__": GENERATED_BUILTINS,
        **HELPERS,
        "_fail": _failure,
        "_StepFailed": StepFailed,
        "_kind": kind,
        "_NOT_BOOL": "the filter gave a value that is not BOOLEAN: ",
        "_put": put_path,
        "_drop": drop_path,
        "_select": select_paths,
        "_MISSING": _ABSENT,
    }
    lines = ["def run(value):"]
    reads = Reads()
    """Top-level fields read into locals so far: valid until a step writes them."""

    def expression(text: Any, loc: tuple[str | int, ...]) -> str | None:
        try:
            compiled = compile_expression(text, names, reads=reads)
        except ExpressionError as exc:
            problems.extend((loc, str(problem)) for problem in exc.problems)
            return None
        namespace.update(compiled.constants)
        return compiled.source

    def constant(value: Any) -> str:
        name = names.next("_K")
        namespace[name] = value
        return name

    def hoisted() -> None:
        """The reads the last step's expressions need, before its code (a dict lookup
        cannot fail, so they stay outside its ``try``)."""
        if reads.hoists:
            at = marks[-1]
            lines[at:at] = [f"    {line}" for line in reads.hoists]
            reads.hoists.clear()

    marks: list[int] = []
    for index, step in steps:
        which = step_kind(step)
        marks.append(len(lines))
        if which == "filter":
            code = expression(step["filter"], ("steps", index, "filter"))
            if code is None:
                continue
            t = names.next("_f")
            lines += [
                "    try:",
                f"        {t} = {code}",
                "    except Exception as exc:",
                f"        raise _fail({index}, exc) from None",
                f"    if {t} is not True:",
                f"        if {t} is False or {t} is None:",
                "            return None",
                f"        raise _StepFailed({index}, _NOT_BOOL + _kind({t}))",
            ]
            hoisted()
        elif which == "set":
            assignments = step["set"]
            if not isinstance(assignments, Mapping) or not assignments:
                problems.append((("steps", index, "set"), "set needs at least one field"))
                continue
            temps: list[tuple[str, tuple[str, ...]]] = []
            body: list[str] = []
            for target, text in assignments.items():
                code = expression(text, ("steps", index, "set", target))
                try:
                    parts = split_path(target)
                except ValueError as exc:
                    problems.append((("steps", index, "set", target), str(exc)))
                    continue
                if code is None:
                    continue
                t = names.next("_s")
                temps.append((t, parts))
                body.append(f"        {t} = {code}")
            if not temps:
                continue
            lines += ["    try:", *body]
            hoisted()
            for _, parts in temps:  # written: read again after this step
                reads.locals.pop(parts[0], None)
            for t, parts in temps:
                if len(parts) == 1:
                    lines.append(f"        value[{constant(parts[0])}] = {t}")
                else:
                    lines.append(f"        _put(value, {constant(parts)}, {t})")
            lines += [
                "    except Exception as exc:",
                f"        raise _fail({index}, exc) from None",
            ]
        elif which == "select":
            paths = tuple(split_path(p) for p in step["select"])
            slow = f"_select(value, {constant(paths)})"
            if all(len(parts) == 1 for parts in paths):
                # every field there (the usual case): one dict display
                keys = [constant(parts[0]) for parts in paths]
                display = ", ".join(f"{key}: value[{key}]" for key in keys)
                lines += [
                    "    try:",
                    f"        value = {{{display}}}",
                    "    except KeyError:",
                    f"        value = {slow}",
                ]
            else:
                lines.append(f"    value = {slow}")
            reads.locals.clear()  # a new record
        elif which == "drop":
            for parts in (split_path(p) for p in step["drop"]):
                reads.locals.pop(parts[0], None)
                if len(parts) == 1:
                    lines.append(f"    value.pop({constant(parts[0])}, None)")
                else:
                    lines.append(f"    _drop(value, {constant(parts)})")
    lines.append("    return value")
    source = "\n".join(lines)
    if problems:
        return _never, source
    source = source.replace(
        "def run(value):", f"def run(value, {as_defaults(namespace, source)}):", 1
    )
    exec(compile(source, "<steps>", "exec"), namespace)
    function: RunOne = namespace["run"]
    return function, source


def _never(value: dict[str, Any]) -> dict[str, Any] | None:  # pragma: no cover
    raise StepFailed(0, "steps with problems were not compiled")
