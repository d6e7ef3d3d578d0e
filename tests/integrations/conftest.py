import pytest
from integration_corpus import QUERY, TEXTS


@pytest.fixture(scope="session")
def reference(embedder):
    """chunktree.order on the texts' own vectors (embedded without any cache): the order every
    adapter must give, as input indices, with and without the query."""
    from chunktree import order

    x = embedder.embed(TEXTS)
    q = embedder.embed([QUERY])[0]
    return {"x": x, "q": q, "query": order(x, q).order.tolist(), "free": order(x).order.tolist()}

