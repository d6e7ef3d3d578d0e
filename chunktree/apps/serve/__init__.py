"""The HTTP service: OpenAI-compatible embeddings, order and select, with micro-batching and limits.

- ``app``: ``create_app``, the factory (auth, metrics and error handling around the routes);
- ``service``: what the endpoints share (the model, the batcher, limits, metrics);
- ``routes``: the endpoints, each returning the library result's ``to_dict()``;
- ``batcher``: the micro-batcher that coalesces concurrent requests into model calls;
- ``http``: the limits, the OpenAI error shape, reading request bodies;
- ``server``: uvicorn with the connection limits (head size, slow clients, connection count, shutdown).
"""

from chunktree.apps.serve.app import create_app
from chunktree.apps.serve.http import Limits

__all__ = ["Limits", "create_app"]
