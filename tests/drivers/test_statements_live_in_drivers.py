"""Every SQL statement the package runs lives in the driver layer (`drivers/`): no other
module builds a statement with SQLAlchemy, runs one, or asks which database it talks
to. The modules above the drivers keep validation, orchestration and the public
models (docs/architecture.md, "Where each database's SQL lives")."""

from __future__ import annotations

import ast
from pathlib import Path

import faststream_sqla

PACKAGE = Path(faststream_sqla.__file__).resolve().parent
#: modules outside drivers/ that may build SQL, each with the reason
EXEMPT = {
    "schema.py": "declares the tables: server defaults and partial-index predicates are SQL text",
    "migrations.py": "runs Alembic's migrations and the start-up schema check",
}
#: SQLAlchemy's statement builders
BUILDERS = {"select", "insert", "update", "delete", "text"}
#: what runs a statement, on a connection, a session or a DB-API cursor
RUNNERS = {"execute", "scalar", "scalars", "exec_driver_sql"}


def _sqlalchemy_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """The names this module binds to the sqlalchemy package, and to its statement
    builders (`from sqlalchemy import select`)."""
    modules, builders = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "sqlalchemy":
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy"):
            builders |= {
                alias.asname or alias.name for alias in node.names if alias.name in BUILDERS
            }
    return modules, builders


def _reads_dialect_name(node: ast.Attribute) -> bool:
    owner = node.value
    return node.attr == "name" and (
        (isinstance(owner, ast.Attribute) and owner.attr == "dialect")
        or (isinstance(owner, ast.Name) and owner.id == "dialect")
    )


def statements_in(source: str) -> list[tuple[int, str]]:
    """(line, what) for each statement built or run, and each read of the database's
    name, in `source`."""
    tree = ast.parse(source)
    modules, builders = _sqlalchemy_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _reads_dialect_name(node):
            found.append((node.lineno, "reads dialect.name"))
        if not isinstance(node, ast.Call):
            continue
        called = node.func
        if isinstance(called, ast.Name) and called.id in builders:
            found.append((node.lineno, f"builds {called.id}(...)"))
        elif isinstance(called, ast.Attribute):
            owner = called.value
            if called.attr in BUILDERS and isinstance(owner, ast.Name) and owner.id in modules:
                found.append((node.lineno, f"builds {owner.id}.{called.attr}(...)"))
            elif called.attr in RUNNERS:
                found.append((node.lineno, f"runs .{called.attr}(...)"))
    return sorted(found)


def test_no_module_above_the_drivers_builds_or_runs_a_statement():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module.startswith("drivers/") or module in EXEMPT:
            continue
        found += [f"{module}:{line}: {what}" for line, what in statements_in(path.read_text())]
    assert not found, "SQL outside faststream_sqla/drivers/:\n" + "\n".join(found)


def test_every_exemption_is_a_module_that_exists():
    assert [m for m in EXEMPT if not (PACKAGE / m).is_file()] == []


def test_the_check_finds_each_kind_of_statement():
    source = """
import sqlalchemy as sa
from sqlalchemy import delete as remove, update

async def work(conn, engine, table):
    await conn.execute(sa.select(table))
    await conn.scalar(sa.text("SELECT 1"))
    rows = (await conn.scalars(update(table))).all()
    await conn.exec_driver_sql(str(remove(table)))
    return engine.dialect.name, sa.insert(table)
"""
    assert statements_in(source) == [
        (6, "builds sa.select(...)"),
        (6, "runs .execute(...)"),
        (7, "builds sa.text(...)"),
        (7, "runs .scalar(...)"),
        (8, "builds update(...)"),
        (8, "runs .scalars(...)"),
        (9, "builds remove(...)"),
        (9, "runs .exec_driver_sql(...)"),
        (10, "builds sa.insert(...)"),
        (10, "reads dialect.name"),
    ]
