"""Operating the queue: `QueueAdmin` and what it returns (docs/operations.md)."""

from faststream_sqla.drivers.postgresql.partitions import PartitionReport

from .api import QueueAdmin
from .models import (
    Binding,
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
    ReplicaLag,
    ScheduleInfo,
    Throughput,
    WorkerInfo,
    to_json,
)

__all__ = [
    "Binding",
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
    "ReplicaLag",
    "ScheduleInfo",
    "Throughput",
    "WorkerInfo",
    "to_json",
]
