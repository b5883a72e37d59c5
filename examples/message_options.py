"""Priority, ordering keys and idempotency keys: `faststream run examples.message_options:app`.

Uses SQLite by default; set DATABASE_URL to run it on PostgreSQL or MariaDB, e.g.
DATABASE_URL=postgresql+asyncpg://postgres@127.0.0.1:5432/test

Every handler returns a line that is published to the "handled" queue, whose handler logs
it: the log (and the "handled" rows of the archive, by id) show the order in which the
messages were handled.
"""

import os

from faststream import FastStream, Logger
from faststream_sqla import Envelope, SqlaBroker, SqlaMessage, upgrade_schema

DATABASE_URL = os.environ.get("DATABASE_URL", "sqlite+aiosqlite:///example.db")

broker = SqlaBroker(DATABASE_URL)
app = FastStream(broker)
handled = broker.publisher("handled")


# One worker: one message at a time, the highest priority first.
@broker.subscriber("notifications")
@handled
async def notify(text: str, msg: SqlaMessage) -> str:
    return f"notification, priority {msg.priority}: {text}"


# Four workers, yet one order's events still run one at a time, in publish order.
@broker.subscriber("order-events", max_workers=4)
@handled
async def order_event(event: str, msg: SqlaMessage) -> str:
    return f"{msg.ordering_key}: {event}"


@broker.subscriber("payments")
@handled
async def charge(payment: dict) -> str:
    return f"payment {payment['id']}: charged {payment['amount']}"


@broker.subscriber("handled")
async def report(line: str, logger: Logger) -> None:
    logger.info("handled %s", line)


@app.on_startup
async def publish() -> None:
    # Production apps run `faststream-sqla db upgrade --url ...` in their deploy step.
    await upgrade_schema(DATABASE_URL)
    # A producer that publishes before the consumers start (as another service could),
    # so that the first claim already sees every message.
    async with SqlaBroker(DATABASE_URL) as producer:
        # Published lowest priority first, handled highest first.
        for text, priority in (("weekly digest", 0), ("new sign-in", 5), ("disk full", 10)):
            await producer.publish(text, queue="notifications", priority=priority)

        # Two orders' events, interleaved; each order's are handled in this order.
        for order_id, event in ((1, "created"), (2, "created"), (1, "paid"), (1, "shipped"),
                                (2, "paid")):
            await producer.publish(event, queue="order-events", ordering_key=f"order-{order_id}")

        # A retried publish: the same key and payload return the waiting message's id.
        payment = {"id": 42, "amount": "9.90"}
        first = await producer.publish(payment, queue="payments", idempotency_key="payment-42")
        again = await producer.publish(payment, queue="payments", idempotency_key="payment-42")
        # In a batch each item carries its own key.
        batch = await producer.publish_batch(
            Envelope(payment, idempotency_key="payment-42"),
            Envelope({"id": 43, "amount": "5.00"}, idempotency_key="payment-43"),
            queue="payments",
        )
        app.logger.info("payment 42 published three times: ids %s, %s and %s; payment 43: %s",
                        first, again, batch[0], batch[1])
