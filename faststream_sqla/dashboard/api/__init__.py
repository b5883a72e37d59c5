"""The JSON API's routes, one module per area; `create_app` puts each under /api."""

from . import breakers, channels, dead_letters, messages, queues, schedules, workers

API_ROUTERS = [
    queues.router,
    messages.router,
    dead_letters.router,
    channels.router,
    breakers.router,
    schedules.router,
    workers.router,
]

__all__ = ["API_ROUTERS"]
