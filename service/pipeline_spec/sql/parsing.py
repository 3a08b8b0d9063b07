"""A script -> its statements' syntax trees, by sqlglot, with every syntax problem.

sqlglot's RisingWave dialect already reads what a pipeline script says (``CREATE SOURCE``
with ``WATERMARK FOR``, ``FROM TUMBLE(t, ts, INTERVAL ...)``, ``FOR SYSTEM_TIME AS OF``,
``CREATE SINK``); :class:`ClockworkSql` changes it only where it refuses a form we take:
``SESSION(...)`` as a function (RisingWave's parser keeps the word for ``SET SESSION``).
No grammar is written here.

Each statement is parsed on its own, so a syntax error in one does not hide the problems
of the others, and in place: the text before it is blanked (newlines kept), so every
token offset, and with it every line and column, is the script's.

The ``EMIT`` clause is not SQL sqlglot knows (ksqlDB's ``EMIT CHANGES``, RisingWave's
``EMIT ON WINDOW CLOSE``): results here are final per window, which is what ``EMIT ON
WINDOW CLOSE`` (and ``EMIT FINAL``) say, so those are accepted and taken out of the text
(blanked, offsets kept) before parsing; ``EMIT CHANGES`` asks for an updating result and
is refused by name.

Flink's window table functions, ``TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), size))`` (and
``HOP``, ``SESSION``), say the same as RisingWave's ``TUMBLE(t, ts, size)``: the words
and parentheses that only Flink writes (``TABLE(``, the inner ``TABLE``,
``DESCRIPTOR(``/``)``, the outer ``)``) are blanked the same way, so a script copied
from Flink reads as the form the compiler knows, and every position stays the script's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

import sqlglot
from sqlglot import exp
from sqlglot.dialects.risingwave import RisingWave
from sqlglot.errors import ParseError, TokenError
from sqlglot.parsers.risingwave import RisingWaveParser
from sqlglot.tokenizer_core import Token, TokenType

from .problems import Position, SqlProblem, Text

__all__ = ["MAX_SCRIPT", "ClockworkSql", "Statement", "parse_script"]

MAX_SCRIPT = 65_536
"""Characters of one script (a pipeline is a handful of statements)."""
MAX_STATEMENTS = 64


class ClockworkSql(RisingWave):
    """RisingWave's SQL, with ``SESSION(...)`` read as a call (the session window)."""

    class Parser(RisingWaveParser):
        FUNC_TOKENS: ClassVar[set[TokenType]] = {*RisingWaveParser.FUNC_TOKENS, TokenType.SESSION}

        def _parse_as_command(self, start: Token) -> exp.Command:
            """Where sqlglot would give up on a statement and keep it as an opaque
            command, say where it stopped understanding it (a syntax error there)."""
            self.raise_error("unexpected here", self._curr or self._prev)
            command: exp.Command = super()._parse_as_command(start)  # errors not raised
            return command


@dataclass(frozen=True, slots=True)
class Statement:
    """One parsed statement: its number (1-based) and tree."""

    number: int
    tree: exp.Expression


def parse_script(text: Text) -> tuple[list[Statement], list[SqlProblem]]:
    """Every statement of the script that parses, and every problem of those that do not."""
    sql = text.sql
    if len(sql) > MAX_SCRIPT:
        return [], [_problem(Position(0, 1, 1), f"a script is limited to {MAX_SCRIPT} characters")]
    try:
        tokens = ClockworkSql().tokenize(sql)
    except TokenError as exc:
        return [], [_problem(_unterminated(text), f"syntax error: {_token_message(exc)}")]
    problems: list[SqlProblem] = []
    groups = _split(tokens)
    if not groups:
        return [], [
            _problem(
                Position(0, 1, 1),
                "the script is empty: write CREATE SOURCE "
                "statements and one INSERT INTO ... SELECT",
            )
        ]
    if len(groups) > MAX_STATEMENTS:
        return [], [
            _problem(Position(0, 1, 1), f"a script is limited to {MAX_STATEMENTS} statements")
        ]
    text.statement_starts = [group[0].start for group in groups]
    statements: list[Statement] = []
    for number, group in enumerate(groups, start=1):
        blanked, emit_problems = _without_emit(text, number, group)
        problems.extend(emit_problems)
        blanked += _flink_window_words(group)
        start, end = group[0].start, group[-1].end + 1
        source = _blank(sql[:start]) + _blank_spans(sql[start:end], blanked, start)
        tree, parse_problems = _parse(text, number, source)
        problems.extend(parse_problems)
        if tree is not None:
            statements.append(Statement(number, tree))
    return statements, problems


def _split(tokens: list[Token]) -> list[list[Token]]:
    """The tokens of each statement (between semicolons; empty statements dropped)."""
    groups: list[list[Token]] = [[]]
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            groups.append([])
        else:
            groups[-1].append(token)
    return [group for group in groups if group]


WINDOW_FUNCTIONS = frozenset({"TUMBLE", "HOP", "SESSION", "CUMULATE"})


def _flink_window_words(group: list[Token]) -> list[tuple[int, int]]:
    """The spans Flink's window table function syntax adds to RisingWave's (see the
    module docstring): ``TABLE ( FN ( TABLE t , DESCRIPTOR ( ts ) ... ) )``."""
    words = [t.text.upper() if t.token_type != TokenType.STRING else "" for t in group]
    spans: list[tuple[int, int]] = []
    for i in range(len(group) - 5):
        if not (
            words[i] == "TABLE"
            and group[i + 1].token_type == TokenType.L_PAREN
            and words[i + 2] in WINDOW_FUNCTIONS
            and group[i + 3].token_type == TokenType.L_PAREN
            and words[i + 4] == "TABLE"
        ):
            continue
        close = _matching(group, i + 1)
        if close is None:
            continue  # unbalanced: the parser says where
        spans += [(group[i].start, group[i + 1].end), (group[i + 4].start, group[i + 4].end)]
        spans.append((group[close].start, group[close].end))
        for j in range(i + 5, close - 3):
            if (
                words[j] == "DESCRIPTOR"
                and group[j + 1].token_type == TokenType.L_PAREN
                and group[j + 3].token_type == TokenType.R_PAREN
            ):
                spans += [
                    (group[j].start, group[j + 1].end),
                    (group[j + 3].start, group[j + 3].end),
                ]
    return spans


def _matching(group: list[Token], opening: int) -> int | None:
    """The index of the parenthesis closing the one at ``opening``."""
    depth = 0
    for k in range(opening, len(group)):
        kind = group[k].token_type
        if kind == TokenType.L_PAREN:
            depth += 1
        elif kind == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                return k
    return None


def _without_emit(
    text: Text, number: int, group: list[Token]
) -> tuple[list[tuple[int, int]], list[SqlProblem]]:
    """The spans of an ``EMIT ...`` clause to blank, and the problem of a refused one."""
    words = [t.text.upper() for t in group]
    for i, word in enumerate(words):
        if word != "EMIT" or group[i].token_type == TokenType.STRING:
            continue
        rest = words[i + 1 : i + 4]
        if rest[:3] == ["ON", "WINDOW", "CLOSE"]:
            return [(group[i].start, group[i + 3].end)], []
        if rest[:1] == ["FINAL"]:
            return [(group[i].start, group[i + 1].end)], []
        at = text.at_offset(group[i].start, number)
        message = (
            "EMIT CHANGES is not supported: results are final per window (EMIT ON WINDOW "
            "CLOSE, Flink's window aggregation); an updating result needs retractions"
            if rest[:1] == ["CHANGES"]
            else "EMIT is followed by ON WINDOW CLOSE or FINAL here (results are final per window)"
        )
        end = group[i + 1].end if len(group) > i + 1 else group[i].end
        return [(group[i].start, end)], [SqlProblem(at, "sql_unsupported", message)]
    return [], []


def _parse(text: Text, number: int, source: str) -> tuple[exp.Expression | None, list[SqlProblem]]:
    try:
        trees = sqlglot.parse(source, read=ClockworkSql)
    except ParseError as exc:
        problems = [
            SqlProblem(_error_position(text, number, err), "sql_syntax", _parse_message(err))
            for err in exc.errors
        ] or [SqlProblem(text.statement_start(number), "sql_syntax", f"syntax error: {exc}")]
        return None, problems[:1]  # the first is the cause; the rest mostly its echoes
    except TokenError as exc:
        return None, [
            _problem(text.statement_start(number), f"syntax error: {_token_message(exc)}")
        ]
    except RecursionError:
        return None, [_problem(text.statement_start(number), "the statement is nested too deeply")]
    found = [tree for tree in trees if isinstance(tree, exp.Expression)]
    if len(found) != 1:
        return None, [_problem(text.statement_start(number), "one statement expected here")]
    return found[0], []


def _error_position(text: Text, number: int, err: dict[str, object]) -> Position:
    """sqlglot's ``col`` is the *last* column of the offending token: step back over it."""
    line, col = err.get("line"), err.get("col")
    if not isinstance(line, int) or not isinstance(col, int) or line < 1:
        return text.statement_start(number)
    highlight = err.get("highlight")
    width = len(highlight) if isinstance(highlight, str) and highlight else 1
    return Position(number, line, max(col - width + 1, 1))


def _parse_message(err: dict[str, object]) -> str:
    description = str(err.get("description") or "invalid statement")
    description = re.sub(
        r"<Token token_type: TokenType\.(\w+), text: ([^,]*),.*?>", r"\2", description
    )
    if "SENTINEL" in description:
        description = description.replace("SENTINEL", "the end of the statement")
    return f"syntax error: {description}"


def _token_message(exc: TokenError) -> str:
    message = str(exc)
    return "an unterminated string or quoted name" if "tokenizing" in message else message


def _unterminated(text: Text) -> Position:
    """Where an unterminated quote opens (the tokenizer says only that one does)."""
    sql, i, opened = text.sql, 0, None
    while i < len(sql):
        char = sql[i]
        if char == "-" and sql.startswith("--", i):
            end = sql.find("\n", i)
            i = len(sql) if end < 0 else end
        elif char == "/" and sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            if end < 0:
                return text.at_offset(i, 0)
            i = end + 1
        elif char in "'\"":
            end = sql.find(char, i + 1)
            while end >= 0 and sql.startswith(char * 2, end):
                end = sql.find(char, end + 2)
            if end < 0:
                opened = i
                break
            i = end
        i += 1
    return text.at_offset(opened, 0) if opened is not None else Position(0, 1, 1)


def _blank(part: str) -> str:
    """``part`` as spaces, newlines kept (offsets, lines and columns unchanged)."""
    return re.sub(r"[^\n]", " ", part)


def _blank_spans(part: str, spans: list[tuple[int, int]], base: int) -> str:
    for start, end in spans:
        a, b = start - base, end - base + 1
        part = part[:a] + _blank(part[a:b]) + part[b:]
    return part


def _problem(at: Position, message: str) -> SqlProblem:
    return SqlProblem(at, "sql_syntax", message)
