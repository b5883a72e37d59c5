"""Durations as typed in shells and passed by FastStream's CLI (`faststream_sqla.durations`)."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from faststream_sqla.durations import seconds_of, whole_number
from faststream_sqla.exceptions import InvalidOptionError


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (5, 5.0), (2.5, 2.5), (timedelta(minutes=2), 120.0), ("30", 30.0), (" 2.5 ", 2.5),
        (".5", 0.5), ("500ms", 0.5), ("5s", 5.0), ("1m", 60.0), ("2h", 7200.0),
        ("1d", 86400.0), ("3 M", 180.0),
    ],
)
def test_numbers_timedeltas_and_durations_are_seconds(value: object, seconds: float) -> None:
    assert seconds_of(value) == seconds


@pytest.mark.parametrize("value", ["soon", "", "5x", "-5", "1e3", "5s5", True, None, math.nan, [5]])
def test_anything_else_is_a_typed_error_naming_the_option(value: object) -> None:
    with pytest.raises(InvalidOptionError, match="^ttl must be"):
        seconds_of(value, "ttl")


# int(), float() and a regex's \d take any script's digits: a fullwidth "5s" would be 5 s
@pytest.mark.parametrize(
    "value", ["\uff15", "\uff15s", "1.\uff15", "\u0663m", "\u0665ms", "\u00b2"]
)
def test_digits_of_other_scripts_are_a_typed_error(value: str) -> None:
    with pytest.raises(InvalidOptionError, match=r"^delay must be"):
        seconds_of(value)


@pytest.mark.parametrize(
    ("text", "number"),
    [("5", 5), (" 12 ", 12), ("0", 0), ("-3", None), ("\uff15", None), ("\u00b2", None),
     ("1_000", None), ("", None), ("+1", None)],
)  # fmt: skip
def test_a_whole_number_is_ascii_digits_only(text: str, number: int | None) -> None:
    assert whole_number(text) == number
