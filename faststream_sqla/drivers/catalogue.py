"""Named SQL statements read from a database package's `queries.sql`.

A catalogue is a text file of blocks, each a `-- name: <name>` line, one or more
comment lines saying why the statement is as it is, then the statement. Table names
are `{message}`, `{archive}`, ... placeholders (the `QueueTables` attribute of that
name), filled with the engine's quoted names once per driver; values are `:name`
bound parameters, left to `sa.text`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

__all__ = ["Catalogue", "FilledCatalogue", "NamedQuery", "QueryCatalogueError", "load_catalogue"]

CATALOGUE_FILE = "queries.sql"

_NAME = re.compile(r"^--\s*name:\s*(\S+)\s*$")
# `{table}` only: a word in braces; `{{` and `}}` are not used in our SQL
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class QueryCatalogueError(LookupError):
    """A catalogue has no query of that name, or a query names a table the driver
    does not have."""


@dataclass(frozen=True)
class NamedQuery:
    name: str
    comment: str
    template: str
    #: the table names the template leaves to fill
    placeholders: frozenset[str]

    def fill(self, tables: Mapping[str, str]) -> str:
        if not self.placeholders:
            return self.template
        missing = sorted(self.placeholders - tables.keys())
        if missing:
            msg = f"query {self.name!r} names unknown table(s) {', '.join(missing)}"
            raise QueryCatalogueError(msg)
        return _PLACEHOLDER.sub(lambda m: tables[m.group(1)], self.template)


@dataclass(frozen=True)
class Catalogue:
    package: str
    queries: Mapping[str, NamedQuery]

    def query(self, name: str) -> NamedQuery:
        try:
            return self.queries[name]
        except KeyError:
            msg = f"no query named {name!r} in {self.package}/{CATALOGUE_FILE}"
            raise QueryCatalogueError(msg) from None

    def without_tables(self, name: str) -> str:
        """A statement that names none of our tables, so needs no engine to quote them."""
        return self.query(name).fill({})

    def filled(self, tables: Mapping[str, str]) -> FilledCatalogue:
        """Every statement with its table names in: done once, so a call costs a
        dictionary lookup."""
        return FilledCatalogue(
            self.package, {name: q.fill(tables) for name, q in self.queries.items()}
        )


@dataclass(frozen=True)
class FilledCatalogue:
    package: str
    statements: Mapping[str, str]

    def __getitem__(self, name: str) -> str:
        try:
            return self.statements[name]
        except KeyError:
            msg = f"no query named {name!r} in {self.package}/{CATALOGUE_FILE}"
            raise QueryCatalogueError(msg) from None


def parse_catalogue(package: str, text: str) -> Catalogue:
    queries: dict[str, NamedQuery] = {}
    name: str | None = None
    comment: list[str] = []
    body: list[str] = []

    def close() -> None:
        if name is None:
            if "".join(body).strip():
                msg = f"{package}/{CATALOGUE_FILE} has SQL before its first '-- name:'"
                raise QueryCatalogueError(msg)
            return
        if name in queries:
            msg = f"{package}/{CATALOGUE_FILE} names {name!r} twice"
            raise QueryCatalogueError(msg)
        template = "\n".join(body).strip()
        queries[name] = NamedQuery(
            name, " ".join(comment), template, frozenset(_PLACEHOLDER.findall(template))
        )

    for line in text.splitlines():
        if match := _NAME.match(line):
            close()
            name, comment, body = match.group(1), [], []
        elif not body and line.startswith("--"):
            comment.append(line[2:].strip())
        elif body or line.strip():
            body.append(line)
    close()
    return Catalogue(package, queries)


@functools.cache
def load_catalogue(package: str) -> Catalogue:
    """The `queries.sql` of `package` (e.g. `faststream_sqla.drivers.postgresql`),
    read once per process from the installed package."""
    text = resources.files(package).joinpath(CATALOGUE_FILE).read_text(encoding="utf-8")
    return parse_catalogue(package, text)
