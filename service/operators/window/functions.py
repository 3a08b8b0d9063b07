"""Full-window user functions: all of a window's elements at once.

A window function is any callable ``function(key, window, values)`` where ``window``
is ``(start, end)`` and ``values`` the list of the window's values in arrival order
(after a before-evictor); it returns the JSON-serializable result. Loading one by
``"package.module:Name"`` is the UDF loader's job; the operator takes the callable.
A function that raises produces a :class:`~service.operators.base.FailedRecord`
with reason :data:`FUNCTION_ERROR` and no result for that firing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .assigners import Window

WindowFunction = Callable[[str, Window, list[Any]], Any]

FUNCTION_ERROR = "window_function_error"
