import os
import shutil
import tempfile
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


_TEMP_CACHE = None


def pytest_configure(config):
    # Keep built models and the embedding cache of a test run out of the user's cache directory.
    global _TEMP_CACHE
    if "CHUNKTREE_CACHE_DIR" not in os.environ:
        _TEMP_CACHE = tempfile.mkdtemp(prefix="chunktree-test-cache-")
        os.environ["CHUNKTREE_CACHE_DIR"] = _TEMP_CACHE


def pytest_unconfigure(config):
    if _TEMP_CACHE is not None:
        shutil.rmtree(_TEMP_CACHE, ignore_errors=True)
        del os.environ["CHUNKTREE_CACHE_DIR"]


@pytest.fixture(scope="session")
def embedder():
    from chunktree import Embedder

    return Embedder()


@pytest.fixture(scope="session")
def tokenizer(embedder):
    return embedder.tokenizer


def unit_topics(n, d=32, topics=5, spread=0.6, seed=0):
    """Synthetic unit vectors around ``topics`` random centres, float32, and each row's topic."""
    import numpy as np

    rng = np.random.default_rng(seed)
    truth = rng.integers(0, topics, n)
    x = rng.standard_normal((topics, d))[truth] + spread * rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), truth


@pytest.fixture(scope="session")
def shared_data():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def sample_embeddings(embedder):
    """Embeddings of the whole sample corpus, chunked with the defaults (about 1,500 chunks);
    for ``real_data`` tests only."""
    from chunktree import chunk_documents, sample_documents

    chunks = chunk_documents(sample_documents(), embedder.tokenizer)
    return embedder.embed([c.text for c in chunks])


@pytest.fixture(scope="session")
def squad_articles(shared_data):
    import json

    return json.loads((shared_data / "squad_shifts_new_wiki_v1.0.json").read_text(encoding="utf-8"))["data"]
