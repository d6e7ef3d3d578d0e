import os
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


_TEMP_CACHE = None


def pytest_configure(config):
    # Keep built models and the embedding cache of a test run out of the user's cache directory.
    global _TEMP_CACHE
    if "CHUNKTREE_CACHE_DIR" not in os.environ:
        _TEMP_CACHE = tempfile.mkdtemp(prefix="chunktree-test-cache-")
        os.environ["CHUNKTREE_CACHE_DIR"] = _TEMP_CACHE
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        _compile_kernels()


def _compile_kernels():
    """Compile the numba kernels once, in the process that starts the test workers and before it
    starts them: a kernel with a signature compiles when its module is imported, so workers that
    import it at once with an empty numba cache (a fresh clone) would each compile it again."""
    import importlib
    import pkgutil

    import chunktree.kernels

    for module in pkgutil.iter_modules(chunktree.kernels.__path__):
        importlib.import_module(f"chunktree.kernels.{module.name}")


def pytest_unconfigure(config):
    if _TEMP_CACHE is not None:
        shutil.rmtree(_TEMP_CACHE, ignore_errors=True)
        del os.environ["CHUNKTREE_CACHE_DIR"]


@pytest.fixture(scope="session")
def embedder():
    from chunktree import Embedder

    return Embedder()


@pytest.fixture
def cli(capsys, monkeypatch, embedder):
    """``chunktree ARGS`` in this process: returncode, stdout and stderr, as a subprocess run
    gives them. Where the flags ask for the default embedder, the command gets the session's
    (loading the model again takes about 0.4 s a command); other flags build their own, as the
    command does."""
    from chunktree.apps.cli import common
    from chunktree.apps.cli import main as cli_module
    from chunktree.models.embedder import DEFAULT_BATCH_SIZE
    from chunktree.models.registry import DEFAULT_MODEL

    build = common.make_embedder

    def shared(args):
        flags = (args.model, args.backend, args.precision, args.threads,
                 getattr(args, "batch_size", DEFAULT_BATCH_SIZE), getattr(args, "batch_tokens", None))
        default = (DEFAULT_MODEL.name, "auto", "auto", None, DEFAULT_BATCH_SIZE, None)
        return embedder if flags == default else build(args)

    monkeypatch.setattr(common, "make_embedder", shared)

    def call(*args, cwd=None):
        if cwd is not None:
            monkeypatch.chdir(cwd)
        code = cli_module.main([str(a) for a in args])
        out = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)

    return call


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
