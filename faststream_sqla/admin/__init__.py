"""Operating the queue: `QueueAdmin` and what it returns (docs/operations.md)."""

from .api import QueueAdmin
from .models import (
    Count,
    DeadLetter,
    DeadLetterPage,
    DeadLetterSummary,
    ErrorCount,
    MessageDetails,
    MoveResult,
    Progress,
    QueueStats,
    to_json,
)

__all__ = [
    "Count",
    "DeadLetter",
    "DeadLetterPage",
    "DeadLetterSummary",
    "ErrorCount",
    "MessageDetails",
    "MoveResult",
    "Progress",
    "QueueAdmin",
    "QueueStats",
    "to_json",
]
