"""Stateless steps (filter, set, select, drop, unnest) over SQL expressions.

Pure logic: sqlglot parses, :mod:`.compiler` turns the tree into Python code over a
whitelist, :mod:`.program` compiles a pipeline's steps into one function. The runtime
runs it in the decoder (service/runtime/partition/decoding.py), before the key and the timestamp.
"""

from .compiler import MAX_DEPTH, MAX_TEXT, check_expression, compile_expression, evaluator
from .errors import EvalError, ExpressionError, ExpressionProblem, StepFailed
from .program import MAX_OUTPUTS, STEP_KINDS, StepProgram, StepsConfigError, step_kind
from .values import FUNCTIONS, LAZY_FUNCTIONS

__all__ = [
    "FUNCTIONS",
    "LAZY_FUNCTIONS",
    "MAX_DEPTH",
    "MAX_OUTPUTS",
    "MAX_TEXT",
    "STEP_KINDS",
    "EvalError",
    "ExpressionError",
    "ExpressionProblem",
    "StepFailed",
    "StepProgram",
    "StepsConfigError",
    "check_expression",
    "compile_expression",
    "evaluator",
    "step_kind",
]
