"""What the API's routes share: the admin API as a dependency, the read-only guard,
the path and query parameters several areas take."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Query

from faststream_sqla.admin import QueueAdmin
from faststream_sqla.schema import MAX_QUEUE_NAME_LENGTH

from ..models import MAX_TEXT
from ..settings import admin_of, changes_allowed

Admin = Annotated[QueueAdmin, Depends(admin_of)]
#: the dependencies of every route that changes something
CHANGES = [Depends(changes_allowed)]

QueueName = Annotated[str, Path(min_length=1, max_length=MAX_QUEUE_NAME_LENGTH)]
Channel = Annotated[str, Query(min_length=1, max_length=MAX_TEXT)]
Limit = Annotated[int, Query(ge=1, le=1000)]
