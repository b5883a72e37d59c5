"""The message state machine, driven by hypothesis on a real database.

Any interleaving of publishes, claims, outcomes (ack, nack, reject, an unstarted
release) from current and from stale claims, and release-stuck sweeps must leave every
published message in exactly one place (queued or archived, never both, never gone),
settle each message at most once, and let no stale claim change anything.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from faststream.message import AckStatus
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla import lifecycle
from faststream_sqla.message import ClaimedMessage
from faststream_sqla.retry import ConstantRetryStrategy
from faststream_sqla.schema import MessageState, QueueTables

from tests.support.helpers import plain_message, prepared_driver

MAX_ATTEMPTS = 3
RETRY_AT_ONCE = ConstantRetryStrategy(delay_seconds=0, max_attempts=MAX_ATTEMPTS)
SETTINGS = settings(
    max_examples=20, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _outcome(raw: ClaimedMessage, kind: str) -> lifecycle.Outcome:
    now = lifecycle.db_time(raw, time.monotonic())
    if kind == "ack":
        return lifecycle.completed(raw, now)
    if kind == "release":
        return lifecycle.released(raw, started=False)
    raw.decision = None
    if kind == "reject":
        raw.decision = AckStatus.REJECTED
    return lifecycle.after_attempt(
        raw, started_at=now, finished_at=now, error=RuntimeError(kind),
        retry_strategy=RETRY_AT_ONCE,
    )


def machine_for(url: str) -> type[RuleBasedStateMachine]:
    tables = QueueTables()

    class MessageLifecycle(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.loop = asyncio.new_event_loop()
            self.engine = create_async_engine(url)
            self.driver = self.run(prepared_driver(self.engine))
            self.run(self._clear())
            self.published: set[int] = set()
            self.current: dict[int, ClaimedMessage] = {}  # id -> the claim that holds it
            self.stale: list[ClaimedMessage] = []  # claims overtaken: must change nothing
            self.archived: dict[int, str] = {}
            self.attempts: dict[int, int] = {}

        def run(self, coro: Any) -> Any:
            return self.loop.run_until_complete(coro)

        async def _clear(self) -> None:
            async with self.engine.begin() as conn:
                await conn.execute(tables.message.delete())
                await conn.execute(tables.archive.delete())

        def teardown(self) -> None:
            self.run(self.engine.dispose())
            self.loop.close()

        @rule(n=st.integers(1, 3))
        def publish(self, n: int) -> None:
            ids = self.run(self.driver.insert_committed(self.engine, [plain_message()] * n))
            assert len(set(ids)) == n and not set(ids) & self.published
            self.published |= set(ids)

        @rule(limit=st.integers(1, 4))
        def claim(self, limit: int) -> None:
            for raw in self.run(self.driver.claim(self.engine, "q", limit)):
                assert raw.id in self.published and raw.id not in self.archived
                assert raw.id not in self.current, "claimed while another claim holds it"
                self.current[raw.id] = raw

        @precondition(lambda self: self.current)
        @rule(data=st.data(), kind=st.sampled_from(["ack", "nack", "reject", "release"]))
        def settle_current(self, data: st.DataObject, kind: str) -> None:
            message_id = data.draw(st.sampled_from(sorted(self.current)))
            raw = self.current.pop(message_id)
            outcome = _outcome(raw, kind)
            assert self.run(self.driver.write_outcomes(self.engine, [outcome])) == 1
            if kind == "ack":
                self.archived[message_id] = MessageState.COMPLETED
            elif kind == "reject":
                self.archived[message_id] = MessageState.FAILED
            elif kind == "nack":
                self.attempts[message_id] = self.attempts.get(message_id, 0) + 1
                if self.attempts[message_id] >= MAX_ATTEMPTS:
                    self.archived[message_id] = MessageState.FAILED
            self.stale.append(raw)  # its claim is spent: a second outcome is late

        @precondition(lambda self: self.stale)
        @rule(data=st.data(), kind=st.sampled_from(["ack", "nack", "reject", "release"]))
        def settle_stale(self, data: st.DataObject, kind: str) -> None:
            raw = data.draw(st.sampled_from(self.stale))
            outcome = _outcome(raw, kind)
            assert self.run(self.driver.write_outcomes(self.engine, [outcome])) == 0

        @precondition(lambda self: self.stale)
        @rule(data=st.data())
        def renew_stale_lease(self, data: st.DataObject) -> None:
            raw = data.draw(st.sampled_from(self.stale))
            leases = [(raw.id, raw.token)]
            assert self.run(self.driver.extend_leases(self.engine, leases)) == 0

        @rule()
        def release_stuck(self) -> None:
            released = self.run(self.driver.release_stuck(self.engine, ["q"], 0.0))
            states = self.run(self._states())[0]
            lost = [i for i in self.current if states.get(i) != MessageState.PROCESSING]
            for message_id in lost:
                self.stale.append(self.current.pop(message_id))
            assert released == len(lost)

        async def _states(self) -> tuple[dict[int, str], dict[int, str], dict[int, int]]:
            async with self.engine.connect() as conn:
                queued = (await conn.execute(
                    tables.message.select().with_only_columns(
                        tables.message.c.id, tables.message.c.state, tables.message.c.claims_count
                    )
                )).all()
                archived = (await conn.execute(
                    tables.archive.select().with_only_columns(
                        tables.archive.c.id, tables.archive.c.state
                    )
                )).all()
            return (
                {row[0]: row[1] for row in queued},
                {row[0]: row[1] for row in archived},
                {row[0]: row[2] for row in queued},
            )

        @invariant()
        def every_message_is_in_exactly_one_place(self) -> None:
            queued, archived, tokens = self.run(self._states())
            assert not queued.keys() & archived.keys(), "both queued and archived"
            assert queued.keys() | archived.keys() == self.published, "a message was lost"
            assert archived == self.archived, "settled otherwise than its claim said"
            processing = {i for i, state in queued.items() if state == MessageState.PROCESSING}
            assert processing == set(self.current)
            for message_id, raw in self.current.items():
                assert tokens[message_id] == raw.token

    return MessageLifecycle


def test_any_order_of_operations_loses_nothing_and_settles_once(database_url):
    run_state_machine_as_test(machine_for(database_url), settings=SETTINGS)
