"""The channel claim's plan (channels.plan): fair turns, limits, rates, pauses and
breakers decided from what a read found, without a database."""

from __future__ import annotations

from datetime import datetime, timedelta

from faststream_sqla.channels.limits import Rate
from faststream_sqla.channels.plan import EXTRA_CANDIDATES, PLAIN, Candidate, QueueRow, plan

NOW = datetime(2026, 11, 27, 12, 0, 0)


def head(**fields) -> QueueRow:
    return QueueRow(now=NOW, **fields)


def channels(*names: str, after_rotation: bool = True, **fields) -> list[Candidate]:
    return [Candidate(name, after_rotation=after_rotation, **fields) for name in names]


def shares(planned) -> dict[str, int]:
    return {m.name: m.share for m in planned.members if m.share}


def test_channels_take_turns_one_message_each():
    planned = plan(head(), channels("a", "b", "c"), 7)
    assert shares(planned) == {"a": 3, "b": 2, "c": 2}
    assert planned.rotation == "c"  # the last channel served: the next claim starts after it


def test_a_channel_at_its_concurrency_gets_no_share():
    planned = plan(
        head(busy={"a": 2}, in_flight=2),
        channels("a", max_concurrency=2) + channels("b"),
        4,
    )
    assert shares(planned) == {"b": 4}


def test_the_queues_own_concurrency_bounds_the_whole_claim():
    planned = plan(head(max_concurrency=5, in_flight=2), channels("a", "b"), 10)
    assert sum(shares(planned).values()) == 3


def test_paused_channels_and_channels_with_nothing_due_get_nothing():
    candidates = channels("a", paused=True) + channels("b", due=None) + channels("c")
    assert shares(plan(head(), candidates, 5)) == {"c": 5}


def test_a_paused_queue_plans_nothing():
    assert plan(head(paused=True), channels("a"), 5) is None


def test_a_rate_caps_the_share_and_the_write_charges_its_window():
    planned = plan(head(), channels("a", rate=Rate(2, 1.0)) + channels("b"), 6)
    assert shares(planned) == {"a": 2, "b": 4}
    (charged,) = planned.windows
    assert charged[0] == "a"


def test_a_short_list_wraps_to_the_messages_without_a_channel_and_the_start():
    after = channels("x")
    from_start = channels("a", "x", after_rotation=False)
    planned = plan(head(rotation="w", plain_waiting=True), after + from_start, 6)
    assert shares(planned) == {"x": 2, PLAIN: 2, "a": 2}


def test_a_full_list_does_not_wrap():
    names = [f"c{i:02}" for i in range(4 + EXTRA_CANDIDATES)]
    planned = plan(head(plain_waiting=True), channels(*names), 4)
    assert PLAIN not in shares(planned)
    assert shares(planned) == dict.fromkeys(names[:4], 1)


def test_when_every_channel_is_full_the_rotation_moves_past_them():
    candidates = channels("a", "b", max_concurrency=1)
    planned = plan(head(busy={"a": 1, "b": 1}, in_flight=2, rotation=PLAIN), candidates, 4)
    assert shares(planned) == {} and planned.rotation == "b"


def test_an_open_channel_breaker_holds_its_channel_until_its_reopening():
    opened = channels("a", breaker="OPEN", reopened=False) + channels("b")
    assert shares(plan(head(), opened, 4, channel_breakers=True)) == {"b": 4}
    # without the subscriber's channel breakers, its state is not the claim's business
    assert shares(plan(head(), opened, 4)) == {"a": 2, "b": 2}


def test_a_reopened_channel_breaker_lets_one_probe_through():
    since = NOW - timedelta(seconds=30)
    reopened = channels(
        "a", breaker="OPEN", reopened=True, breaker_since=since, breaker_until=NOW
    ) + channels("b")
    planned = plan(head(), reopened, 4, channel_breakers=True)
    assert shares(planned) == {"a": 1, "b": 3}
    assert planned.probes == [("a", 30.0, "OPEN")]


def test_a_group_shares_its_limit_among_its_channels():
    candidates = channels("acme/x", "acme/y", group_stored=True, group_max_concurrency=2)
    candidates += channels("other")
    planned = plan(head(), candidates, 6)
    given = shares(planned)
    assert given["acme/x"] + given["acme/y"] == 2 and given["other"] == 4
