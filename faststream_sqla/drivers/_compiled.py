"""A statement compiled once for a driver, for the routes that skip SQLAlchemy's
`Connection` (`_asyncpg`, `_asyncmy`)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping
from typing import Any, overload

import sqlalchemy as sa
from sqlalchemy.engine import Dialect as SqlDialect
from sqlalchemy.sql.compiler import SQLCompiler


class DriverStatement:
    """A statement compiled once for the engine's dialect: its SQL text and its arguments
    in order.

    Constants bound inside the statement are converted by their SQLAlchemy types here,
    once. The values given per call (`per_call`) go to the driver as they are, so their
    types must need no conversion: that is checked here too, rather than trusted.
    """

    def __init__(
        self, statement: sa.ClauseElement, dialect: SqlDialect, per_call: Collection[str]
    ) -> None:
        compiled = statement.compile(dialect=dialect)
        if not isinstance(compiled, SQLCompiler):  # DDL compiles without bound values
            msg = f"not a SQL statement with parameters: {type(statement).__name__}"
            raise TypeError(msg)
        self.sql = compiled.string
        self._order: list[tuple[str, bool, Any]] = []
        for name in compiled.positiontup or ():
            process = compiled.binds[name].type.bind_processor(dialect)
            if name in per_call:
                if process is not None:
                    msg = f"parameter {name!r} needs conversion; pass it converted"
                    raise TypeError(msg)
                self._order.append((name, True, None))
            else:
                value = compiled.params[name]
                self._order.append((name, False, process(value) if process else value))
        if missing := set(per_call) - {name for name, *_ in self._order}:
            msg = f"the statement has no parameters named {sorted(missing)}"
            raise TypeError(msg)

    def arguments(self, params: Mapping[str, Any]) -> list[Any]:
        return [params[name] if given else fixed for name, given, fixed in self._order]


class DriverStatements:
    """A driver's statements by name, each compiled the first time it is needed:
    the engine's SQLAlchemy dialect, which compiling needs, is known only then."""

    def __init__(self) -> None:
        self._compiled: dict[Hashable, DriverStatement] = {}

    @overload
    def get(self, name: Hashable) -> DriverStatement | None: ...

    @overload
    def get(
        self,
        name: Hashable,
        dialect: SqlDialect,
        build: Callable[[], sa.ClauseElement],
        per_call: Collection[str],
    ) -> DriverStatement: ...

    def get(
        self,
        name: Hashable,
        dialect: SqlDialect | None = None,
        build: Callable[[], sa.ClauseElement] | None = None,
        per_call: Collection[str] = (),
    ) -> DriverStatement | None:
        """The statement `name`, compiled from `build()` on first use; without `build`,
        None if it was not compiled yet."""
        compiled = self._compiled.get(name)
        if compiled is None and build is not None:
            assert dialect is not None
            compiled = self.add(name, dialect, build(), per_call)
        return compiled

    def of(
        self,
        name: Hashable,
        dialect: SqlDialect,
        statement: sa.ClauseElement,
        per_call: Collection[str],
    ) -> DriverStatement:
        """The statement `name`, compiled from the already built `statement` on first
        use."""
        return self.get(name, dialect, lambda: statement, per_call)

    def add(
        self,
        name: Hashable,
        dialect: SqlDialect,
        statement: sa.ClauseElement,
        per_call: Collection[str],
    ) -> DriverStatement:
        """`statement` compiled and kept as `name`."""
        compiled = self._compiled[name] = DriverStatement(statement, dialect, per_call)
        return compiled
