"""Topic names and binding patterns, and which patterns a topic matches. Pure: no I/O.

A topic is dot-separated words (`orders.created`). A pattern is the same, where a word
may also be `*` (exactly one word) or `#` (zero or more words), as AMQP's topic
exchanges and pgmq read them: `orders.*` matches `orders.created`, `orders.#` matches
`orders`, `orders.created` and `orders.eu.created`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from faststream_sqla.exceptions import InvalidTopicError, shown

#: topics and patterns are text of at most this many characters
MAX_TOPIC_LENGTH = 255
ONE_WORD, ANY_WORDS = "*", "#"
WILDCARDS = (ONE_WORD, ANY_WORDS)
_WORD_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def _words(value: object, what: str, *, wildcards: bool) -> tuple[str, ...]:
    if not isinstance(value, str):
        msg = f"{what} must be a str, got {type(value).__name__}"
        raise InvalidTopicError(msg)
    if not value or len(value) > MAX_TOPIC_LENGTH:
        msg = f"{what} must be 1 to {MAX_TOPIC_LENGTH} characters long, got {len(value)}"
        raise InvalidTopicError(msg)
    words = tuple(value.split("."))
    for position, word in enumerate(words, start=1):
        if not word:
            msg = (
                f"{what} {shown(value)} has an empty word (word {position}): two dots, "
                "or a dot at an end"
            )
            raise InvalidTopicError(msg)
        if word in WILDCARDS:
            if not wildcards:
                msg = (
                    f"{what} {shown(value)} contains the wildcard {word!r}: a message is "
                    "published to one topic; wildcards belong in binding patterns"
                )
                raise InvalidTopicError(msg)
            continue
        if not _WORD_CHARACTERS.issuperset(word):
            wild = "*" in word or "#" in word
            msg = (
                f"{what} {shown(value)}: word {shown(word)} mixes a wildcard with other "
                "characters (`*` and `#` must be whole words)"
                if wild and wildcards
                else f"{what} {shown(value)}: word {shown(word)} may hold only letters, "
                "digits, `_` and `-`"
            )
            raise InvalidTopicError(msg)
    return words


def checked_topic(value: object) -> str:
    """A topic a message is published to: dot-separated words of letters, digits, `_`
    and `-`, no wildcards; else InvalidTopicError."""
    _words(value, "topic", wildcards=False)
    assert isinstance(value, str)
    return value


def checked_pattern(value: object) -> str:
    """A binding pattern: a topic whose words may also be `*` or `#`; else
    InvalidTopicError."""
    if not isinstance(value, str):
        _words(value, "topic pattern", wildcards=True)  # raises, naming the type
    _pattern_words(value)
    assert isinstance(value, str)
    return value


@functools.lru_cache(maxsize=4096)
def _pattern_words(value: str) -> tuple[str, ...]:
    return _words(value, "topic pattern", wildcards=True)


def pattern_root(pattern: str) -> str:
    """The pattern's first word where that is a literal word, else "": a publish reads
    only the bindings whose root is its topic's first word or "" (drivers/topics.py)."""
    first = pattern.split(".", 1)[0]
    return "" if first in WILDCARDS else first


def topic_root(topic: str) -> str:
    """The first word of a topic: the root of the patterns that may match it, beside ""."""
    return topic.split(".", 1)[0]


def _after_any_words(states: Iterable[int], pattern: tuple[str, ...]) -> set[int]:
    """`states` (positions in `pattern`) plus those reached by letting each `#` there
    match zero words."""
    reached = set()
    for state in states:
        reached.add(state)
        while state < len(pattern) and pattern[state] == ANY_WORDS:
            state += 1
            reached.add(state)
    return reached


def matches(pattern: str, topic: str) -> bool:
    """Whether `topic` matches `pattern` (both already checked). Walks the topic's
    words once, keeping the set of pattern positions reached: linear in the topic
    for a given pattern, however many `#` it holds."""
    words = _pattern_words(pattern)
    states = _after_any_words((0,), words)
    for word in topic.split("."):
        following = set()
        for state in states:
            if state == len(words):
                continue
            expected = words[state]
            if expected == ANY_WORDS:
                following.add(state)  # `#` takes this word and may take more
            elif expected == ONE_WORD or expected == word:
                following.add(state + 1)
        if not following:
            return False
        states = _after_any_words(following, words)
    return len(words) in states


def route(bindings: Iterable[tuple[str, str]], topic: str) -> list[str]:
    """The queues that (pattern, queue) `bindings` send `topic` to, each once, sorted by
    name: the order a publish to the topic inserts its copies in and returns their ids."""
    return sorted({queue for pattern, queue in bindings if matches(pattern, topic)})


def route_targets(
    candidates: Iterable[tuple[str, str, str | None]], topic: str
) -> list[tuple[str, str | None]]:
    """Where a publish to `topic` writes, from (pattern, queue, channel) candidates:
    each bound queue once (channel None), sorted by name, then each endpoint once (its
    delivery queue and its name as the channel), sorted by name: the order of the ids
    the publish returns."""
    queues = sorted(
        {q for pattern, q, channel in candidates if channel is None and matches(pattern, topic)}
    )
    endpoints = sorted(
        {
            (q, channel)
            for pattern, q, channel in candidates
            if channel is not None and matches(pattern, topic)
        },
        key=lambda target: target[1],
    )
    return [(q, None) for q in queues] + [(q, c) for q, c in endpoints]


__all__ = [
    "MAX_TOPIC_LENGTH",
    "checked_pattern",
    "checked_topic",
    "matches",
    "pattern_root",
    "route",
    "route_targets",
    "topic_root",
]
