"""Each database's queries.sql: every block named, explained and fillable, every name
used by the package, and a clear error for a name or table that is not there."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy.dialects import mysql, postgresql, sqlite

import faststream_sqla
from faststream_sqla.drivers.catalogue import QueryCatalogueError, load_catalogue, parse_catalogue
from faststream_sqla.drivers.mysql import driver as mysql_module
from faststream_sqla.drivers.mysql.driver import MySQLDriver
from faststream_sqla.drivers.postgresql.driver import STILL_CLAIMED, PostgresDriver
from faststream_sqla.drivers.sqlite import driver as sqlite_module
from faststream_sqla.drivers.sqlite.driver import SQLiteDriver
from faststream_sqla.schema import TOKEN_COLUMN, MessageState, QueueTables

PACKAGE_SOURCE = Path(faststream_sqla.__file__).parent

DRIVERS = {
    "postgresql": (PostgresDriver, postgresql.dialect()),
    "mysql": (MySQLDriver, mysql.dialect()),
    "sqlite": (SQLiteDriver, sqlite.dialect()),
}


def package_of(database: str) -> str:
    return f"faststream_sqla.drivers.{database}"


def tables_for(database: str) -> QueueTables:
    return QueueTables(dialect=database)


@pytest.mark.parametrize("database", DRIVERS)
def test_every_block_is_named_explained_and_fillable(database: str) -> None:
    catalogue = load_catalogue(package_of(database))
    assert catalogue.queries, f"{database}/queries.sql holds no query"
    table_names = {
        name for name, value in vars(tables_for(database)).items() if hasattr(value, "c")
    }
    for name, query in catalogue.queries.items():
        assert re.fullmatch(r"[a-z][a-z0-9_]*", name), name
        assert query.comment.strip(), f"{name} has no comment saying why"
        assert query.template.strip(), f"{name} has no statement"
        assert query.placeholders <= table_names, (name, query.placeholders - table_names)


@pytest.mark.parametrize("database", DRIVERS)
def test_the_driver_fills_every_query_with_its_quoted_tables(database: str) -> None:
    driver_type, dialect = DRIVERS[database]
    driver = driver_type(tables_for(database))
    engine = SimpleNamespace(dialect=dialect)
    for name, query in load_catalogue(package_of(database)).queries.items():
        sql = driver._sql(engine, name)  # type: ignore[arg-type]
        assert not re.search(r"\{[a-z_]+\}", sql), (name, sql)
        if "message" in query.placeholders:
            assert dialect.identifier_preparer.format_table(driver.tables.message) in sql


@pytest.mark.parametrize("database", DRIVERS)
def test_every_query_is_asked_for_by_the_package(database: str) -> None:
    """A query no code names has rotted: drop it or use it."""
    source = "\n".join(
        path.read_text(encoding="utf-8") for path in PACKAGE_SOURCE.rglob("*.py")
    )
    for name in load_catalogue(package_of(database)).queries:
        assert f'"{name}"' in source, f"{database}/queries.sql: {name} is used nowhere"


def test_the_catalogues_follow_the_schema_constants() -> None:
    """The statements spell out what the code keeps as constants: they must agree."""
    assert TOKEN_COLUMN == "claims_count"
    assert STILL_CLAIMED in load_catalogue(package_of("postgresql")).query("extend_leases").template
    sqlite_leases = load_catalogue(package_of("sqlite")).query("extend_leases").template
    assert sqlite_module._NOW in sqlite_leases
    # MySQL's outcome statements: the JSON document's columns, the state codes
    mysql_queries = load_catalogue(package_of("mysql"))
    archived = mysql_module._ARCHIVED
    requeued = mysql_module._codes(MessageState.PENDING, MessageState.RETRYABLE)
    for name in ("delete_settled", "delete_settled_keyed"):
        assert mysql_module._OUTCOME_ROWS in mysql_queries.query(name).template
        assert archived in mysql_queries.query(name).template
    requeue = mysql_queries.query("requeue").template
    assert mysql_module._OUTCOME_ROWS in requeue
    assert mysql_module._STATE in requeue
    assert f"o.state_code IN ({requeued})" in requeue
    for field in ("first_us", "last_us", "next_us"):
        assert mysql_module._time(field) in requeue


def test_an_unknown_name_raises_naming_the_query() -> None:
    catalogue = load_catalogue(package_of("postgresql"))
    with pytest.raises(QueryCatalogueError, match="no query named 'no_such_query'"):
        catalogue.query("no_such_query")
    driver = PostgresDriver(tables_for("postgresql"))
    engine = SimpleNamespace(dialect=postgresql.dialect())
    with pytest.raises(QueryCatalogueError, match="no query named 'no_such_query'"):
        driver._sql(engine, "no_such_query")  # type: ignore[arg-type]


def test_a_placeholder_with_no_table_raises_naming_the_query() -> None:
    catalogue = parse_catalogue(
        "example", "-- name: read_nowhere\n-- why\nSELECT * FROM {nowhere}\n"
    )
    with pytest.raises(QueryCatalogueError, match="'read_nowhere' names unknown table"):
        catalogue.filled({"message": '"m"'})


def test_sql_before_the_first_name_and_a_repeated_name_are_refused() -> None:
    with pytest.raises(QueryCatalogueError, match="before its first"):
        parse_catalogue("example", "SELECT 1\n-- name: one\n-- why\nSELECT 1\n")
    with pytest.raises(QueryCatalogueError, match="names 'one' twice"):
        parse_catalogue("example", "-- name: one\n-- why\nSELECT 1\n-- name: one\n-- why\nSELECT 2\n")
