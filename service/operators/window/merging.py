"""The merging-window set of one key: Flink's ``MergingWindowSet``, as plain data.

It maps every live window of a merging assigner to its *state window*: the window
whose namespace holds the contents. When windows merge, the merged window takes over
the state window of one of the windows it covers, and the contents of the others are
folded into it, so merging never moves the biggest state and timers keep using the
(visible) window as namespace.
"""

from __future__ import annotations

from collections.abc import Callable

from .assigners import MergeResult, Window
from .errors import WindowStateError

MergeFunction = Callable[[Window, list[Window], Window, list[Window]], None]
"""``merge(merged_window, covered_windows, state_window, state_windows_to_fold_in)``."""

Merger = Callable[[list[Window]], list[MergeResult]]


def add_window(
    mapping: dict[Window, Window],
    new_window: Window,
    merge_windows: Merger,
    merge_function: MergeFunction,
) -> Window:
    """Add ``new_window``, merging as needed; returns the window it now belongs to.

    ``merge_function`` runs once per merge, after the mapping is updated and before this
    returns. A new window that lands inside an existing one, without extending it,
    triggers no merge: the existing window is returned (Flink's
    ``MergingWindowSet.addWindow``). A new window equal to an existing one keeps the
    existing state window.
    """
    windows = list(mapping)
    windows.append(new_window)
    result_window = new_window
    merged_new_window = False
    merges = merge_windows(windows)
    for merged, covered in merges:
        covered = list(covered)
        if new_window in covered:
            covered.remove(new_window)
            merged_new_window = True
            result_window = merged
        if not covered:
            raise WindowStateError(f"merge of {merged} covers no existing window")
        state_window = mapping[covered[0]]
        state_windows = [mapping.pop(window) for window in covered if window in mapping]
        mapping[merged] = state_window
        state_windows.remove(state_window)
        if not (len(covered) == 1 and covered[0] == merged):
            merge_function(merged, covered, state_window, state_windows)
    if not merges or (result_window == new_window and not merged_new_window):
        mapping.setdefault(result_window, result_window)
    return result_window


def extend_window(
    mapping: dict[Window, Window], new_window: Window, merge_function: MergeFunction
) -> Window | None:
    """:func:`add_window` for session windows when at most one window intersects the new
    one (the key's latest session, nearly always); None: call :func:`add_window` instead.

    Same effects as :func:`add_window` with ``SessionAssigner.merge_windows`` (the
    mapping, its order, the ``merge_function`` call, the result), without copying and
    sorting the key's windows. Two windows merge when they intersect as closed
    intervals, ``a.start <= b.end and a.end >= b.start`` (touching windows merge), the
    rule of ``merge_windows``. It relies on the set's invariant that no two of its
    windows intersect (every add merges them): then the new window's only intersecting
    window is all it can merge with, since the union of two intersecting windows meets
    a third only if one of them does.
    """
    start, end = new_window
    found: Window | None = None
    for window in mapping:
        if window[0] <= end and window[1] >= start:
            if found is not None:
                return None  # it bridges two sessions: the general path
            found = window
    if found is None:  # a session of its own (add_window: no merge, setdefault)
        mapping[new_window] = new_window
        return new_window
    if found == new_window:  # add_window: no merge group, the mapping untouched
        return found
    merged = (min(start, found[0]), max(end, found[1]))
    state_window = mapping.pop(found)
    mapping[merged] = state_window  # moved last, as add_window moves it, even if unchanged
    if merged != found:  # else inside an existing window: no merge call
        merge_function(merged, [found], state_window, [])
    return merged


def retire_window(mapping: dict[Window, Window], window: Window) -> Window:
    """Remove ``window``; returns its state window."""
    state_window = mapping.pop(window, None)
    if state_window is None:
        raise WindowStateError(f"window {window} is not in the merging window set")
    return state_window
