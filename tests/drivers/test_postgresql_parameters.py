"""PostgreSQL's claim and outcome parameters, without a database: the arrays a claim returns
become rows, and an outcome batch is sent as array text with exact microseconds."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=timezone.utc)


def naive(value: datetime) -> datetime:
    return value.astimezone(timezone.utc).replace(tzinfo=None)


@pytest.mark.parametrize("arrived", [[0, 1, 2, 3], [2, 0, 3, 1]])
def test_postgresql_claim_arrays_become_rows_oldest_first(arrived) -> None:
    # (priority DESC, next_attempt_at, id) orders a claim; batch publishes share
    # next_attempt_at
    from faststream_sqla.drivers.base import CLAIMED_COLUMNS
    from faststream_sqla.drivers.postgresql.driver import rows_from_columns

    due = [naive(T0), naive(T0), naive(T0 + timedelta(seconds=1)), naive(T0 - timedelta(seconds=2))]
    ids = [7, 9, 3, 1]  # higher priority first, then by due time, then id
    priority = [5, 5, 5, 0]
    values = {"id": ids, "next_attempt_at": due, "priority": priority}

    def column(name: str) -> list:  # the arrays in the order the server sent them
        return [values[name][k] if name in values else f"{name}-{ids[k]}" for k in arrived]

    columns = [column(name) for name in CLAIMED_COLUMNS]
    rows = rows_from_columns(columns)
    assert [row[0] for row in rows] == ids
    assert all(row[1] == f"queue-{row[0]}" for row in rows)  # each row kept together


def test_postgresql_outcome_parameters_are_array_text_and_exact_microseconds() -> None:
    from faststream_sqla.clock import micros_since_epoch
    from faststream_sqla.drivers.base import Outcome
    from faststream_sqla.drivers.postgresql.driver import array_literal, outcome_parameters
    from faststream_sqla.schema import MessageState

    assert array_literal([1, None, -3]) == "{1,NULL,-3}"
    assert array_literal([]) == "{}"
    first = datetime(2026, 11, 22, 7, 0, 0, 123456)
    assert micros_since_epoch(first) == 1795330800123456
    assert micros_since_epoch(None) is None

    done = Outcome(5, 1, MessageState.COMPLETED, 1, 1, first, first)
    params = outcome_parameters([done])
    assert params["ids"] == "{5}" and params["states"] == "{COMPLETED}"
    assert params["first_us"] == "{1795330800123456}"
    # no array to encode when nothing is retried or failed (unnest pads with NULLs)
    assert params["next_us"] is None and params["errors"] is None

    failed = Outcome(6, 2, MessageState.RETRYABLE, 2, 2, first, first, first, 'boom "quoted", {braced}')
    params = outcome_parameters([done, failed])
    assert params["states"] == "{COMPLETED,RETRYABLE}"
    assert params["next_us"] == "{NULL,1795330800123456}"
    assert params["errors"] == [None, 'boom "quoted", {braced}']  # free text stays a list
