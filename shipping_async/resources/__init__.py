"""Resource namespaces of the client: ``client.quotes``, ``client.orders``, ``client.webhooks``."""

from shipping_async.resources._order_create import CancelledOrder
from shipping_async.resources.orders import Orders
from shipping_async.resources.quotes import Quotes
from shipping_async.resources.webhooks import Webhooks

__all__ = ["CancelledOrder", "Orders", "Quotes", "Webhooks"]
