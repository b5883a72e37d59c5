"""The column registry (schema.MESSAGE_COLUMNS) and what is derived from it agree: a
new column declared there reaches the tables, the records and every statement."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy.dialects import mysql, postgresql, sqlite

from faststream_sqla.drivers.base import NewMessage
from faststream_sqla.message import ClaimedMessage
from faststream_sqla.schema import (
    ARCHIVED_COLUMNS,
    CLAIMED_COLUMNS,
    INSERTED_COLUMNS,
    MESSAGE_COLUMNS,
    PUBLISHED_COLUMNS,
    QueueTables,
    archive_copy,
)


def test_claimed_columns_are_the_first_fields_of_claimed_message_in_order():
    fields = [f.name for f in dataclasses.fields(ClaimedMessage)]
    assert tuple(fields[: len(CLAIMED_COLUMNS)]) == CLAIMED_COLUMNS


def test_every_published_column_has_its_new_message_field():
    fields = {f.name for f in dataclasses.fields(NewMessage)}
    assert {c.published_as for c in PUBLISHED_COLUMNS} <= fields


def test_every_column_but_the_id_gets_a_value_at_insert_or_may_be_null():
    given = {c.name for c in INSERTED_COLUMNS}
    for column in MESSAGE_COLUMNS:
        assert column.name == "id" or column.name in given or column.nullable, column.name


@pytest.mark.parametrize("dialect", [None, "mysql"])
def test_tables_hold_every_declared_column(dialect):
    tables = QueueTables(dialect=dialect)
    assert {c.name for c in MESSAGE_COLUMNS} <= set(tables.message.c.keys())
    # the archive adds when a message settled and, once redriven, what it became
    assert set(tables.archive.c.keys()) == {*ARCHIVED_COLUMNS, "archived_at", "redriven_to"}


def test_an_archive_copy_takes_settled_columns_from_the_outcome():
    settled = {c.name: f"o.{c.name}" for c in MESSAGE_COLUMNS if c.settled}
    columns, values = archive_copy(settled)
    assert columns == list(ARCHIVED_COLUMNS)
    for name, value in zip(columns, values, strict=True):
        assert value == (f"o.{name}" if name in settled else f"m.{name}")


def test_every_column_type_compiles_on_every_database():
    for dialect in (postgresql.dialect(), mysql.dialect(), sqlite.dialect()):
        for column in MESSAGE_COLUMNS:
            assert column.type.compile(dialect=dialect)


def test_the_option_keywords_and_the_options_record_declare_the_same_options():
    from typing import get_type_hints

    from faststream_sqla.options import DeliveryOptionArgs, DeliveryOptions

    assert set(get_type_hints(DeliveryOptionArgs)) == {
        f.name for f in dataclasses.fields(DeliveryOptions)
    }


def test_tables_of_the_same_names_and_shape_are_built_once_and_shared():
    from faststream_sqla.schema import TableNames

    first, second = QueueTables(dialect="postgresql"), QueueTables(dialect="sqlite")
    assert first.message is second.message and first.metadata is second.metadata
    mariadb = QueueTables(dialect="mysql")
    assert mariadb.message is not first.message and mariadb.keys is not None
    other = QueueTables(TableNames(message="jobs", archive="jobs_done"), dialect="sqlite")
    assert other.message.name == "jobs" and other.archive.name == "jobs_done"
    assert other.metadata is not first.metadata
