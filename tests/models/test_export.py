"""`chunktree export`: a model folder's graph in a file of its own, checked against the PyTorch
vectors of the bundled model (``fixtures/golden_minilm.npz``, made by ``fixtures/make_golden.py``)."""

from pathlib import Path

import numpy as np
import pytest
from model_folders import write_model_folder

from chunktree import Embedder
from chunktree.models import registry

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden_minilm.npz"


def test_export_round_trip_matches_pytorch(tmp_path, cli):
    out = tmp_path / "minilm.onnx"
    r = cli("export", registry.weights_dir(registry.DEFAULT_MODEL), "-o", out, "--name", "minilm-export")
    assert r.returncode == 0, r.stderr
    assert "window 256, dim 384, mean pooling" in r.stdout
    exported = Embedder(out)
    assert exported.model_id.startswith("minilm-export@sha256:") and exported.window == 256
    g = np.load(GOLDEN)
    within = g["tokens"] <= 256
    got = exported.embed([str(t) for t in g["texts"][within]])
    assert np.sum(got * g["vectors"][within], axis=1).min() >= 0.9999


def test_an_exported_cls_model_keeps_its_pooling_and_prompts(tmp_path):
    from chunktree.models.export import export_model

    folder = write_model_folder(tmp_path / "tiny-bge", "bert", "cls", prompts={"query": "query: "})
    report = export_model(folder, tmp_path / "tiny.onnx", window=32)
    assert (report.pooling, report.window) == ("cls", 32)
    exported, direct = Embedder(tmp_path / "tiny.onnx"), Embedder(folder)
    assert exported.pooling == "cls" and exported.prompts == {"query": "query: "} and exported.window == 32
    texts = ["a whale", "the captain kept the log"]
    np.testing.assert_allclose(exported.embed(texts), direct.embed(texts), atol=1e-5)


def test_export_names_what_it_cannot_do(tmp_path):
    from chunktree.models.export import export_model

    with pytest.raises(ValueError, match=r"config.json"):
        export_model(tmp_path, tmp_path / "x.onnx")
    folder = write_model_folder(tmp_path / "m", max_seq_length=64)
    with pytest.raises(ValueError, match=r"window must be from 8 to 64 \(the model's own\); got 128"):
        export_model(folder, tmp_path / "x.onnx", window=128)
