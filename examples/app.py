"""Orders example: `faststream run examples.app:app`.

Uses SQLite by default; set DATABASE_URL to run it on PostgreSQL or MariaDB, e.g.
DATABASE_URL=postgresql+asyncpg://postgres@127.0.0.1:5432/test
"""

import os

from pydantic import BaseModel

from faststream import AckPolicy, FastStream, Logger
from faststream_sqla import SqlaBroker, SqlaMessage, upgrade_schema
from faststream_sqla.retry import ExponentialBackoffRetryStrategy

DATABASE_URL = os.environ.get("DATABASE_URL", "sqlite+aiosqlite:///app.db")

broker = SqlaBroker(DATABASE_URL)
app = FastStream(broker)
shipments = broker.publisher("shipments")


class Order(BaseModel):
    id: int
    item: str
    quantity: int


@broker.subscriber(
    "orders",
    max_workers=4,
    retry_strategy=ExponentialBackoffRetryStrategy(initial_delay_seconds=1, max_attempts=5),
    ack_policy=AckPolicy.NACK_ON_ERROR,
)
@shipments
async def handle_order(order: Order, msg: SqlaMessage, logger: Logger) -> dict:
    logger.info("order %s: %s x %s (delivery %s)", order.id, order.quantity, order.item,
                msg.deliveries_count)
    return {"order_id": order.id, "status": "shipped"}


@broker.subscriber("shipments")
async def handle_shipment(shipment: dict, logger: Logger) -> None:
    logger.info("shipment for order %s: %s", shipment["order_id"], shipment["status"])


@app.on_startup
async def create_tables() -> None:
    # Production apps run `faststream-sqla db upgrade --url ...` in their deploy step;
    # the example creates its tables itself so that one command runs it.
    await upgrade_schema(DATABASE_URL)


@app.after_startup
async def publish_orders() -> None:
    ids = await broker.publish_batch(
        *(Order(id=i, item="widget", quantity=i) for i in range(1, 4)), queue="orders"
    )
    # the app's own logger: a plain logging.getLogger() would have no handler and
    # would stay at WARNING, so the line would never show
    app.logger.info("published orders %s", ids)
