"""The channel claim's plan: given what the claim's read found (the queue's control
row and the channels with due messages, as typed records), share the claim among the
channels in turns within every limit, rate and breaker, and say what its write must
change. Pure: no SQL, no clock but the read's, no database. The read and the write
that surround it are in claim.py."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from faststream_sqla.schema import BreakerState

from . import rate as window
from .groups import group_of
from .limits import Rate

#: channels read per claim beyond its limit: room to pass over full or paused ones
EXTRA_CANDIDATES = 8
#: MySQL: keys-index entries read per candidate channel wanted (MySQLChannelClaim._walk)
SCAN_PER_CANDIDATE = 20
#: MySQL: the most live messages of a channel its take reads whole
#: (MySQLChannelClaim._whole_channels)
WHOLE_AT_MOST = 2 * SCAN_PER_CANDIDATE

#: the rotation's name for the messages without a channel
PLAIN = ""


class ProbeMissed(Exception):
    """A channel's breaker changed between a claim's read and its write, so the probe
    this plan gave it no longer applies: the write raises it, and the claim rolls back
    and reads again. Never raised to a caller."""


def rate_of(count: int | None, period: float | None) -> Rate | None:
    """A rate read as its two columns; None where either is unset."""
    return None if count is None or period is None else Rate(count, period)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A channel with due messages, as the claim's read found it."""

    channel: str
    #: listed by the read's walk from the rotation on; False: by its walk from the
    #: start (the channels a wrapping round reaches last)
    after_rotation: bool
    #: its control row exists
    stored: bool = False
    paused: bool = False
    #: what the read says of its due messages; falsy when none is due (MySQL: the id
    #: of its first due message)
    due: Any = True
    max_concurrency: int | None = None
    rate: Rate | None = None
    rate_slot: int | None = None
    rate_counts: str | None = None
    #: its group's control row (groups.py), where it belongs to one
    group_stored: bool = False
    group_paused: bool = False
    group_max_concurrency: int | None = None
    group_rate: Rate | None = None
    group_rate_slot: int | None = None
    group_rate_counts: str | None = None
    #: its own circuit breaker's state, whether its reopening is due, and the opening
    #: it is in (from, until)
    breaker: str | None = None
    reopened: bool = False
    breaker_since: datetime | None = None
    breaker_until: datetime | None = None
    #: MySQL: keys-index entries the read's walk went through for it (0 elsewhere)
    keys_read: int = 0


@dataclass
class Member:
    """One channel (or PLAIN) as this claim sees it."""

    name: str
    in_flight: int = 0
    #: its control row exists
    stored: bool = False
    paused: bool = False
    max_concurrency: int | None = None
    rate: Rate | None = None
    rate_slot: int | None = None
    rate_counts: str | None = None
    window: window.Window | None = None
    share: int = 0
    #: its own circuit breaker may let a probe through: this claim's share of it is
    #: the probe, and the write marks the breaker HALF_OPEN from now
    reopening: bool = False
    #: that breaker's cooldown (its last opening's), for a probe that ends without a
    #: verdict: another may go after as long
    cooldown: float = 0.0
    #: that breaker's state as read (OPEN, or HALF_OPEN for another probe)
    breaker_state: str | None = None
    #: the group it belongs to (groups.py), seen as a member of its own: its limits
    #: and in-flight count are the group's, its share the sum of its channels'
    group: Member | None = None
    #: MySQL: the read's range of the keys index held all its live messages (it is
    #: not the last channel of its range), so the take may read them all
    whole: bool = False
    #: what the read said of its due messages (drivers.channel_claim, ChannelClaim._channel_due)
    due: Any = None

    def room(self, now: float) -> int | None:
        """What its limits let it start now (None: no limit)."""
        room: int | None = None
        if self.max_concurrency is not None:
            room = max(0, self.max_concurrency - self.in_flight)
        if self.rate is not None:
            self.window = window.window_at(self.rate_slot, self.rate_counts, self.rate, now)
            allowed = window.allowance(self.window, self.rate)
            room = allowed if room is None else min(room, allowed)
        return room


@dataclass
class QueueRow:
    """The queue's control row, as the read found it, with the read's totals."""

    paused: bool = False
    max_concurrency: int | None = None
    rate: Rate | None = None
    rate_slot: int | None = None
    rate_counts: str | None = None
    channel_max_concurrency: int | None = None
    channel_rate: Rate | None = None
    rotation: str | None = None
    version: int = 0
    in_flight: int = 0
    #: messages without a channel are due
    plain_waiting: bool = False
    #: in flight, per channel (None: without one)
    busy: dict[str | None, int] = field(default_factory=dict)
    now: datetime = field(default_factory=lambda: datetime(1970, 1, 1))
    #: MariaDB: the read's walks streamed (MySQLChannelClaim._walk): they end only at
    #: their number of channels, so a part that lists fewer reached its end
    streamed: bool = False


@dataclass
class Plan:
    """What one claim writes."""

    members: list[Member]
    rotation: str | None
    queue_window: window.Window | None
    #: (channel, window after this claim, whether its row exists) for rate-limited ones
    windows: list[tuple[str, window.Window, bool]]
    #: (channel, cooldown, state read) of the channels whose breaker this claim's
    #: share probes
    probes: list[tuple[str, float, str]] = field(default_factory=list)

    @property
    def shape(self) -> tuple[int, bool]:
        """How many channels get a share, and whether PLAIN does."""
        channels = sum(1 for m in self.members if m.share > 0 and m.name != PLAIN)
        plain = any(m.share > 0 and m.name == PLAIN for m in self.members)
        return channels, plain


def share_out(members: Sequence[Member], limit: int, queue_room: int | None, now: float) -> int:
    """Give out `limit` in turns, one message a turn, within each member's room, its
    group's and the queue's; the total given. A round gives one turn to each channel
    in no group and one to each group (at its first channel's place), which passes
    its turns round its channels. Paused members, and those of a paused group, get
    none."""
    total = limit if queue_room is None else min(limit, queue_room)
    rooms = {id(m): 0 if m.paused else m.room(now) for m in members}
    for m in members:
        group = m.group
        if group is not None and id(group) not in rooms:
            rooms[id(group)] = 0 if group.paused else group.room(now)

    def has_room(member: Member) -> bool:
        for limited in (member, member.group):
            if limited is not None:
                room = rooms[id(limited)]
                if room is not None and limited.share >= room:
                    return False
        return True

    slots: list[list[Member]] = []
    of_group: dict[int, list[Member]] = {}
    for m in members:
        if m.group is None:
            slots.append([m])
        elif id(m.group) in of_group:
            of_group[id(m.group)].append(m)
        else:
            of_group[id(m.group)] = [m]
            slots.append(of_group[id(m.group)])
    #: where each slot's next turn starts among its members
    turn = [0] * len(slots)
    given = 0
    while given < total:
        gave = False
        for i, slot in enumerate(slots):
            if given >= total:
                break
            for step in range(len(slot)):
                member = slot[(turn[i] + step) % len(slot)]
                if has_room(member):
                    member.share += 1
                    if member.group is not None:
                        member.group.share += 1
                    given += 1
                    turn[i] = (turn[i] + step + 1) % len(slot)
                    gave = True
                    break
        if not gave:
            break
    return given


def _seconds(when: datetime) -> float:
    return when.replace(tzinfo=timezone.utc).timestamp()


def plan(
    head: QueueRow, candidates: Sequence[Candidate], limit: int, *, channel_breakers: bool = False
) -> Plan | None:
    """Share up to `limit` among the read's candidates (those after the rotation, then
    those from the start); None if nothing may be claimed. With
    `channel_breakers` (a subscriber with circuit_breaker_per_channel, which counts
    their verdicts) the channels' own breakers hold their claims too."""
    if head.paused or limit <= 0:
        return None
    now = _seconds(head.now)
    queue_room: int | None = None
    if head.max_concurrency is not None:
        queue_room = max(0, head.max_concurrency - head.in_flight)
    queue_window = None
    if head.rate is not None:
        queue_window = window.window_at(head.rate_slot, head.rate_counts, head.rate, now)
        allowed = window.allowance(queue_window, head.rate)
        queue_room = allowed if queue_room is None else min(queue_room, allowed)
    if queue_room == 0:
        return None
    rotation = head.rotation or PLAIN
    after = [c for c in candidates if c.after_rotation]
    groups: dict[str, Member] = {}
    members = [_member(c, head, groups, channel_breakers) for c in after]
    # The messages without a channel and the channels from the start (up to where this
    # turn began: the read keeps to those) take their turn only once this round has
    # reached its last channel; a full list may have more after it.
    if wraps(candidates, limit, streamed=head.streamed):
        seen = {c.channel for c in after}
        members.append(Member(PLAIN, paused=not head.plain_waiting))
        members += [
            _member(c, head, groups, channel_breakers)
            for c in candidates
            if not c.after_rotation and rotation != PLAIN and c.channel not in seen
        ]
    _mark_whole(members, candidates)
    if share_out(members, limit, queue_room, now) == 0:
        # Every channel looked at is full, paused, out of rate or not due: the
        # rotation moves past them, or the channels after them would never be read.
        channels = [m.name for m in members if m.name != PLAIN]
        passed = after[-1].channel if after else (channels[-1] if channels else None)
        if passed is None or passed == rotation:
            return None
        return Plan(members, passed, None, [])
    last = rotation
    windows = []
    for member in members:
        if member.share:
            last = member.name
            if member.window is not None and member.name != PLAIN:
                after_claim = window.taken(member.window, member.share)
                windows.append((member.name, after_claim, member.stored))
    if queue_window is not None:
        queue_window = window.taken(queue_window, sum(m.share for m in members))
    for group in groups.values():
        if group.share and group.window is not None:
            windows.append((group.name, window.taken(group.window, group.share), group.stored))
    probes = [
        (m.name, m.cooldown, m.breaker_state or BreakerState.OPEN.value)
        for m in members
        if m.share and m.reopening
    ]
    return Plan(members, last, queue_window, windows, probes)


def wraps(candidates: Sequence[Candidate], limit: int, *, streamed: bool = False) -> bool:
    """Whether a claim of `limit` goes on to the channels from the start, and to the
    messages without a channel: only once the channels after the rotation ran out
    before the read's bounds did (`streamed`: a read whose walk had no bound but its
    number of channels)."""
    after = [c for c in candidates if c.after_rotation]
    most = limit + EXTRA_CANDIDATES
    if streamed:
        return len(after) < most
    entries = sum(c.keys_read for c in after)
    return len(after) < most and entries < most * SCAN_PER_CANDIDATE


def _mark_whole(members: Sequence[Member], candidates: Sequence[Candidate]) -> None:
    """Each walk of the read lists its channels in order from one range of the index:
    all but the last were read whole; the last may go on past the range's end. A
    channel with many live messages is taken by a branch of its own all the same: the
    join would look every one of them up, a branch stops at its share."""
    last_of_walk = {c.after_rotation: c.channel for c in candidates}  # in the read's order
    ends = set(last_of_walk.values())
    entries = {c.channel: c.keys_read for c in candidates}
    for member in members:
        member.whole = (
            member.name != PLAIN
            and member.name not in ends
            and entries.get(member.name, 0) <= WHOLE_AT_MOST
        )


def _group(candidate: Candidate, head: QueueRow, groups: dict[str, Member]) -> Member | None:
    """The group of the read's channel, one Member per group for the claim."""
    name = group_of(candidate.channel)
    if name is None:
        return None
    found = groups.get(name)
    if found is None:
        found = groups[name] = Member(
            name,
            in_flight=sum(n for ch, n in head.busy.items() if group_of(ch) == name),
            stored=candidate.group_stored,
            paused=candidate.group_paused,
            max_concurrency=candidate.group_max_concurrency,
            rate=candidate.group_rate,
            rate_slot=candidate.group_rate_slot,
            rate_counts=candidate.group_rate_counts,
        )
    return found


def _member(
    candidate: Candidate, head: QueueRow, groups: dict[str, Member], channel_breakers: bool
) -> Member:
    member = Member(
        candidate.channel,
        in_flight=head.busy.get(candidate.channel, 0),
        stored=candidate.stored,
        # nothing due: no share
        paused=candidate.paused or not candidate.due,
        due=candidate.due,
        max_concurrency=head.channel_max_concurrency,
        rate=head.channel_rate,
        rate_slot=candidate.rate_slot,
        rate_counts=candidate.rate_counts,
        group=_group(candidate, head, groups),
    )
    if candidate.max_concurrency is not None:
        member.max_concurrency = candidate.max_concurrency
    if candidate.rate is not None:
        member.rate = candidate.rate
    breaker = candidate.breaker
    if channel_breakers and breaker in (BreakerState.OPEN, BreakerState.HALF_OPEN):
        # OPEN: its messages wait out the cooldown. HALF_OPEN: its probe went out;
        # until its verdict is counted, or a cooldown after (a probe that ended with
        # none: deferred, expired, its process died), no other.
        if not candidate.reopened:
            member.paused = True
        else:
            # one message in flight at a time: the probe, once those that ran before
            # the breaker opened have settled
            member.max_concurrency = 1
            member.reopening = True
            member.breaker_state = breaker
            since, until = candidate.breaker_since, candidate.breaker_until
            if since is not None and until is not None:
                member.cooldown = max(0.0, (until - since).total_seconds())
    return member
