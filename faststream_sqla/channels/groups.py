"""Groups of channels: the channels whose names start with `tenant/` belong to the
group `tenant/`, whose own limits (a control row named after the group) hold across
all of them, and which takes one turn per round of the claim however many of its
channels have messages ready (docs/flow-control.md#groups-of-channels-a-limit-per-tenant).

The group is part of the name, so every process agrees on it without a lookup, and a
tenant cannot leave its group by opening channels. A channel without a `/` is in no
group. A name ending in `/` is the group's own: limits and pause may be set on it, no
message may be published to it.
"""

from __future__ import annotations

from faststream_sqla.exceptions import InvalidOptionError, shown

#: what ends a group's part of a channel's name
SEPARATOR = "/"


def group_of(channel: str | None) -> str | None:
    """The group `channel` belongs to (its name up to and with the first `/`), or
    None."""
    if channel is None:
        return None
    at = channel.find(SEPARATOR)
    return None if at < 0 else channel[: at + 1]


def is_group(name: str) -> bool:
    return name.endswith(SEPARATOR)


def checked_message_channel(channel: str | None) -> str | None:
    """A published message's channel: a group's name is not one."""
    if channel is not None and is_group(channel):
        msg = (
            f"channel {shown(channel)} ends with {SEPARATOR!r}: such a name is a group of "
            "channels, whose limits hold across the channels whose names begin with it; "
            "publish to one of those"
        )
        raise InvalidOptionError(msg)
    return channel


__all__ = ["SEPARATOR", "checked_message_channel", "group_of", "is_group"]
