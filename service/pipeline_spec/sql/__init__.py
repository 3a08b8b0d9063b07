"""SQL front end: a whole pipeline as one SQL script, compiled to the JSON spec (#32).

Pure logic (no I/O): sqlglot parses (:mod:`.parsing`), one module per concern turns the
statements into the spec (:mod:`.sources`, :mod:`.expressions` for steps,
:mod:`.windows`, :mod:`.joins`, :mod:`.sink`), :mod:`.compiler` puts it together and
validates it as any spec; :mod:`.problems` places every problem at its statement, line
and column. The JSON spec stays the stored, canonical form: a SQL pipeline runs as the
spec it compiles to. docs/sql.md is the reference.
"""

from .compiler import Compiled, compile_sql, validate_sql
from .problems import Position, SqlError, SqlProblem

__all__ = ["Compiled", "Position", "SqlError", "SqlProblem", "compile_sql", "validate_sql"]
