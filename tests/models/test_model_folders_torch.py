"""Model folders of every family and pooling chunktree builds, against transformers / PyTorch.

Opt-in: these tests need torch and transformers (``pip install -e ".[reference]"``); without them they
are skipped, so the default suite stays torch-free. Each tiny random model is written by the test
(``model_folders``), loaded by ``Embedder(folder)`` (graph built from the safetensors without torch)
and by ``transformers.AutoModel``; the pooling and normalisation of sentence-transformers are
applied to the PyTorch model's last hidden state.
"""

import numpy as np
import pytest
from model_folders import texts, write_model_folder

from chunktree import Embedder

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def reference(folder, pooling, batch):
    """sentence-transformers' pooling and Normalize over ``AutoModel``'s last hidden state."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    model = transformers.AutoModel.from_pretrained(folder).eval()
    out = []
    for text in batch:
        ids = torch.tensor([tok.encode(text).ids])
        mask = torch.ones_like(ids)
        with torch.no_grad():
            hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state[0]
        pooled = {"cls": hidden[0], "mean": hidden.mean(0), "lasttoken": hidden[-1]}[pooling]
        out.append(torch.nn.functional.normalize(pooled, dim=0).numpy())
    return np.array(out)


@pytest.mark.parametrize("pooling", ["cls", "mean", "lasttoken"])
@pytest.mark.parametrize("family", ["bert", "xlm-roberta", "mpnet"])
def test_a_model_folder_embeds_as_pytorch_does(tmp_path, monkeypatch, family, pooling):
    monkeypatch.setenv("CHUNKTREE_CACHE_DIR", str(tmp_path / "cache"))
    folder = write_model_folder(tmp_path / family, family, pooling)
    batch = texts(100)
    ours = Embedder(folder, backend="onnxruntime", precision="fp32").embed(batch)
    cosines = np.sum(ours * reference(folder, pooling, batch), axis=1)
    assert cosines.min() >= 0.9999, f"{family}/{pooling}: min cosine {cosines.min():.6f}"
