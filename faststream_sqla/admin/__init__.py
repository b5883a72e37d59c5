"""Operating the queue: `QueueAdmin` and what it returns (docs/operations.md)."""

from .api import QueueAdmin
from .models import (
    BreakerStatus,
    BreakerTransition,
    ChannelStatus,
    Count,
    DeadLetter,
    DeadLetterPage,
    DeadLetterSummary,
    ErrorCount,
    LiveMessage,
    MessageDetails,
    MessagePage,
    MoveResult,
    Progress,
    QueueLimits,
    QueueStats,
    ScheduleInfo,
    to_json,
)
from .partitions import PartitionReport

__all__ = [
    "BreakerStatus",
    "BreakerTransition",
    "ChannelStatus",
    "Count",
    "DeadLetter",
    "DeadLetterPage",
    "DeadLetterSummary",
    "ErrorCount",
    "LiveMessage",
    "MessageDetails",
    "MessagePage",
    "MoveResult",
    "PartitionReport",
    "Progress",
    "QueueAdmin",
    "QueueLimits",
    "QueueStats",
    "ScheduleInfo",
    "to_json",
]
