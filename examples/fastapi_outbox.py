"""FastAPI + transactional outbox: `uvicorn examples.fastapi_outbox:app`.

POST /orders writes an order row and publishes its `order-placed` message in one
SQLAlchemy transaction: both commit, or neither does. An order larger than the stock
is refused after the message was published, and the rollback takes the message with
it. The `order-placed` handler confirms the order.

Uses SQLite by default; set DATABASE_URL to run it on PostgreSQL or MariaDB, e.g.
DATABASE_URL=postgresql+asyncpg://postgres@127.0.0.1:5432/test
"""

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import sqlalchemy as sa
from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from faststream_sqla import SqlaBroker, upgrade_schema
from faststream_sqla.fastapi import Logger, SqlaRouter

DATABASE_URL = os.environ.get("DATABASE_URL", "sqlite+aiosqlite:///example.db")
STOCK = 10


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "shop_orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str] = mapped_column(sa.String(100))
    quantity: Mapped[int]
    status: Mapped[str] = mapped_column(sa.String(20), default="placed")


class NewOrder(BaseModel):
    item: str
    quantity: int


class OrderPlaced(BaseModel):
    order_id: int
    item: str


def create_app(database_url: str = DATABASE_URL) -> FastAPI:
    engine = create_async_engine(database_url)
    session = async_sessionmaker(engine, expire_on_commit=False)

    @asynccontextmanager
    async def tables(app: FastAPI) -> AsyncIterator[None]:
        # Production apps run `faststream-sqla db upgrade` and their own migrations in
        # the deploy step; the example creates its tables so that one command runs it.
        await upgrade_schema(engine)
        async with engine.begin() as conn:
            await conn.run_sync(Base.metadata.create_all)
        yield
        await engine.dispose()

    # the broker shares the application's engine, so a session of it can publish
    router = SqlaRouter(engine, lifespan=tables)

    def broker() -> SqlaBroker:
        return router.broker

    @router.subscriber("order-placed")
    async def confirm(event: OrderPlaced, logger: Logger) -> None:
        async with session() as s, s.begin():
            order = await s.get(Order, event.order_id)
            if order is None:  # cannot happen: the message commits with its order
                raise LookupError(event.order_id)
            order.status = "confirmed"
        logger.info("order %s confirmed", event.order_id)

    @router.post("/orders", status_code=201)
    async def place_order(
        new: NewOrder, broker: Annotated[SqlaBroker, Depends(broker)]
    ) -> dict[str, int]:
        async with session() as s, s.begin():
            order = Order(item=new.item, quantity=new.quantity)
            s.add(order)
            await s.flush()  # assigns order.id
            await broker.publish(
                OrderPlaced(order_id=order.id, item=order.item),
                queue="order-placed",
                connection=s,
            )
            if new.quantity > STOCK:
                # raised inside the transaction: the order and its message roll back
                raise HTTPException(409, f"only {STOCK} in stock")
        return {"id": order.id}

    @router.get("/orders/{order_id}")
    async def get_order(order_id: int) -> dict[str, str | int]:
        async with session() as s:
            order = await s.get(Order, order_id)
        if order is None:
            raise HTTPException(404, "no such order")
        return {"id": order.id, "item": order.item, "status": order.status}

    app = FastAPI(title="Orders")
    app.include_router(router)
    return app


app = create_app()
