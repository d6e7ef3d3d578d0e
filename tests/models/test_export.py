"""`chunktree export` (needs the optional torch extra; skipped without it)."""

from pathlib import Path

import numpy as np
import pytest

from chunktree import Embedder
from chunktree.models import registry

pytest.importorskip("torch")
pytest.importorskip("transformers")

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden_minilm.npz"


def test_export_round_trip(tmp_path, embedder):
    from chunktree.models.export import export_model

    out = tmp_path / "minilm.onnx"
    report = export_model(registry.weights_dir(registry.DEFAULT_MODEL), out, name="minilm-export")
    assert report.min_cosine >= 0.9999 and (report.window, report.dim) == (256, 384)
    exported = Embedder(out)
    assert exported.model_id.startswith("minilm-export@sha256:") and exported.window == 256
    g = np.load(GOLDEN)
    within = g["tokens"] <= 256
    got = exported.embed([str(t) for t in g["texts"][within]])
    assert np.sum(got * g["vectors"][within], axis=1).min() >= 0.9999


def test_export_rejects_a_folder_without_config(tmp_path):
    from chunktree.models.export import export_model

    with pytest.raises(ValueError, match=r"config.json"):
        export_model(tmp_path, tmp_path / "x.onnx")
