"""`?statement_cache_size=N` in an asyncpg URL, the option docs/production.md gives for
a pooler in transaction mode: a number for asyncpg, and SQLAlchemy's cache off with it."""

from __future__ import annotations

import pytest

from faststream_sqla.connecting import _statement_cache_option, create_engine
from faststream_sqla.exceptions import InvalidOptionError
from faststream_sqla.urls import parse_url


def test_zero_turns_off_both_statement_caches():
    options: dict = {}
    _statement_cache_option(
        parse_url("postgresql+asyncpg://app:secret@pooler:6432/app?statement_cache_size=0"),
        options,
    )
    assert options == {
        "connect_args": {"statement_cache_size": 0, "prepared_statement_cache_size": 0}
    }


def test_the_engines_url_keeps_the_option_for_the_commands_it_suggests():
    engine = create_engine("postgresql+asyncpg://app@pooler:6432/app?statement_cache_size=0")
    assert engine.url.query["statement_cache_size"] == "0"


def test_connect_args_and_the_urls_own_sqlalchemy_cache_size_win():
    options: dict = {"connect_args": {"statement_cache_size": 5}}
    _statement_cache_option(
        parse_url(
            "postgresql+asyncpg://app@pooler/app?statement_cache_size=0"
            "&prepared_statement_cache_size=10"
        ),
        options,
    )
    assert options == {"connect_args": {"statement_cache_size": 5}}


def test_other_drivers_and_urls_without_it_are_left_alone():
    for url in (
        "postgresql+asyncpg://app@db/app",
        "mysql+asyncmy://app@db/app?statement_cache_size=0",
    ):
        options: dict = {}
        _statement_cache_option(parse_url(url), options)
        assert options == {}


@pytest.mark.parametrize("value", ["-1", "none", "0.5"])
def test_a_value_that_is_not_a_count_is_refused_without_the_password(value):
    with pytest.raises(InvalidOptionError, match="statement_cache_size") as refused:
        create_engine(f"postgresql+asyncpg://app:secret@db/app?statement_cache_size={value}")
    assert "secret" not in str(refused.value)
