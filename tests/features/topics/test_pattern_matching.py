"""Topic patterns: `*` matches exactly one word, `#` zero or more, checked against a
regular expression built per pattern; malformed topics and patterns are refused with
a typed error naming the problem. Pure: no database."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faststream_sqla.exceptions import InvalidOptionError, InvalidTopicError
from faststream_sqla.topics import (
    MAX_TOPIC_LENGTH,
    checked_pattern,
    checked_topic,
    matches,
    pattern_root,
    route,
    topic_root,
)

WORDS = st.sampled_from(["a", "b", "orders", "created", "eu-1", "x_y"])
PATTERN_WORDS = st.one_of(WORDS, st.just("*"), st.just("#"))


def reference_matches(pattern: str, topic: str) -> bool:
    """The pattern as a regular expression over the topic with a dot after every word:
    a literal is `word.`, `*` one `word.`, `#` any run of them."""
    regex = "".join(
        r"(?:[^.]+\.)*" if word == "#" else r"[^.]+\." if word == "*" else re.escape(word) + r"\."
        for word in pattern.split(".")
    )
    return re.fullmatch(regex, topic + ".") is not None


@settings(max_examples=400, deadline=None)
@given(
    pattern=st.lists(PATTERN_WORDS, min_size=1, max_size=6).map(".".join),
    topic=st.lists(WORDS, min_size=1, max_size=7).map(".".join),
)
def test_matching_agrees_with_a_regular_expression_per_pattern(pattern: str, topic: str) -> None:
    assert matches(pattern, topic) == reference_matches(pattern, topic)


@settings(max_examples=200, deadline=None)
@given(topic=st.lists(WORDS, min_size=1, max_size=7).map(".".join))
def test_a_topic_matches_itself_and_hash_alone_matches_everything(topic: str) -> None:
    assert matches(topic, topic)
    assert matches("#", topic)
    assert matches(f"{topic}.#", topic)  # `#` matching zero words at the end


@pytest.mark.parametrize(
    ("pattern", "topic", "expected"),
    [
        ("orders.*", "orders.created", True),
        ("orders.*", "orders", False),
        ("orders.*", "orders.eu.created", False),
        ("orders.#", "orders", True),
        ("orders.#", "orders.eu.created", True),
        ("#.created", "created", True),
        ("#.created", "orders.eu.created", True),
        ("*.created", "created", False),
        ("orders.#.created", "orders.created", True),
        ("orders.#.created", "orders.a.b.created", True),
        ("orders.#.#", "orders", True),
        ("*.*", "orders.created", True),
        ("orders.created", "orders.updated", False),
    ],
)
def test_both_wildcards_on_known_cases(pattern: str, topic: str, expected: bool) -> None:
    assert matches(pattern, topic) is expected


def test_route_gives_each_bound_queue_once_sorted_by_name() -> None:
    bindings = [
        ("orders.*", "shipping"),
        ("orders.#", "audit"),
        ("orders.created", "billing"),
        ("#", "audit"),
        ("payments.*", "ledger"),
    ]
    assert route(bindings, "orders.created") == ["audit", "billing", "shipping"]
    assert route(bindings, "users.created") == ["audit"]
    assert route([], "orders.created") == []


def test_roots_narrow_the_bindings_a_publish_reads() -> None:
    assert pattern_root("orders.*") == "orders"
    assert pattern_root("*.created") == ""
    assert pattern_root("#") == ""
    assert topic_root("orders.eu.created") == "orders"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "1 to 255 characters"),
        ("orders..created", "empty word"),
        (".orders", "empty word"),
        ("orders.", "empty word"),
        ("orders.cre*", "mixes a wildcard"),
        ("orders.#x", "mixes a wildcard"),
        ("orders.cré", "only letters"),
        ("orders created", "only letters"),
        ("a" * (MAX_TOPIC_LENGTH + 1), "1 to 255 characters"),
        (5, "must be a str"),
        (["orders"], "must be a str"),
    ],
)
def test_malformed_patterns_are_refused_naming_the_problem(value: object, problem: str) -> None:
    with pytest.raises(InvalidTopicError, match=problem):
        checked_pattern(value)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("orders.*", "wildcard"),
        ("#", "wildcard"),
        ("orders..x", "empty word"),
        ("orders/x", "only letters"),
        (None, "must be a str"),
    ],
)
def test_a_published_topic_takes_no_wildcards(value: object, problem: str) -> None:
    with pytest.raises(InvalidTopicError, match=problem):
        checked_topic(value)


def test_topic_errors_are_option_errors() -> None:
    assert issubclass(InvalidTopicError, InvalidOptionError)
    assert checked_topic("orders.created") == "orders.created"
    assert checked_pattern("orders.#") == "orders.#"
