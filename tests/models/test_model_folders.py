"""Models named by folder or Hugging Face hub id: what their files say is read (pooling, window,
prompts), a hub id resolves from a local hub cache with the network off, and every file or setting
chunktree cannot use is named. No torch and no network: the models are tiny ones the tests write
(``model_folders``); the graphs are checked against PyTorch in test_model_folders_torch.py."""

import json
import shutil

import numpy as np
import pytest
from model_folders import texts, write_model_folder

from chunktree import Embedder
from chunktree.checks import InvalidValueError
from chunktree.models import source
from chunktree.models.source import ModelNotFoundError, read_folder


@pytest.fixture(autouse=True)
def own_caches(tmp_path, monkeypatch):
    """Each test builds into its own chunktree cache and reads its own hub cache, offline."""
    monkeypatch.setenv("CHUNKTREE_CACHE_DIR", str(tmp_path / "chunktree-cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from huggingface_hub import constants  # read from the environment when first imported: set here too

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def hub_layout(folder, hub, repo_id, commit="0123456789abcdef0123456789abcdef01234567"):
    """Lay ``folder`` out in ``hub`` as huggingface_hub's cache holds a downloaded snapshot: blobs,
    a snapshot folder of links to them, and refs/main naming the commit."""
    repo = hub / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit, encoding="utf-8")
    for file in folder.rglob("*"):
        if file.is_file():
            blob = repo / "blobs" / f"{abs(hash(file.read_bytes())):x}{file.name}"
            blob.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(file, blob)
            link = repo / "snapshots" / commit / file.relative_to(folder)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(blob)
    return repo


def test_what_a_sentence_transformers_folder_says_is_read(tmp_path):
    folder = write_model_folder(tmp_path / "m", "bert", "cls", prompts={"query": "query: ", "document": ""},
                                max_seq_length=48)
    model = read_folder(folder)
    assert (model.name, model.pooling, model.window, model.prompts) == ("m", "cls", 48, {"query": "query: "})
    e = Embedder(folder)
    assert (e.pooling, e.window, e.dim, e.prompts) == ("cls", 48, 32, {"query": "query: "})
    assert e.prompt("query") == "query: " and e.prompt("document") == ""
    assert e.model_id.startswith("m@sha256:")


def test_a_plain_transformers_folder_is_mean_pooled_over_its_positions(tmp_path):
    folder = write_model_folder(tmp_path / "plain", "xlm-roberta", sentence_transformers=False)
    model = read_folder(folder)
    assert model.pooling == "mean" and model.window == 80  # max_position_embeddings less pad_token_id + 1
    assert Embedder(folder).embed(["the whale"]).shape == (1, 32)


def test_the_query_prompt_goes_before_a_query_only(tmp_path):
    """With a query prompt, a query embeds as the prompt and the query would without one."""
    from chunktree.engine.embedding import embed_texts

    folder = write_model_folder(tmp_path / "p", prompts={"query": "ocean river "})
    e = Embedder(folder)
    query = embed_texts(["the whale"], e, prompt="query")[0]
    document = embed_texts(["the whale"], e, prompt="document")[0]
    np.testing.assert_allclose(query, e.embed(["ocean river the whale"]), atol=1e-6)
    np.testing.assert_allclose(document, e.embed(["the whale"]), atol=1e-6)


def test_a_hub_id_resolves_from_the_local_hub_cache_offline(tmp_path):
    folder = write_model_folder(tmp_path / "m", "mpnet", "mean")
    hub_layout(folder, tmp_path / "hub", "tiny-org/tiny-mpnet")
    from_hub = Embedder("tiny-org/tiny-mpnet")
    assert from_hub.model_id.startswith("tiny-org/tiny-mpnet@sha256:")
    np.testing.assert_allclose(from_hub.embed(texts(5)), Embedder(folder).embed(texts(5)), atol=1e-6)


def test_a_hub_model_missing_offline_says_what_to_download():
    with pytest.raises(ModelNotFoundError, match=r"model 'nobody/nothing' is not in the Hugging Face cache and "
                                                 r"HF_HUB_OFFLINE is set; download it on a machine with network: "
                                                 r"`hf download nobody/nothing"):
        Embedder("nobody/nothing")


def test_a_name_that_is_nothing_is_named_with_what_is_allowed():
    with pytest.raises(ModelNotFoundError, match=r"model must be one of \['all-MiniLM-L6-v2'\], an .onnx file, a "
                                                 r"model folder .* or a Hugging Face hub id .*; got 'no such model'"):
        Embedder("no such model")


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "model.safetensors").rename(f / "pytorch_model.bin"),
     r"model.safetensors is missing \(it has pytorch_model.bin: weights in PyTorch's format need torch"),
    (lambda f: (f / "tokenizer.json").unlink(), r"tokenizer.json is missing"),
    (lambda f: (f / "config.json").write_text(json.dumps({"model_type": "t5"})),
     r"model_type 't5' in config.json is not an encoder chunktree builds"),
    (lambda f: (f / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_max_tokens": True})),
     r"pooling \['pooling_mode_max_tokens'\]; chunktree builds exactly one of CLS, mean or last-token"),
    (lambda f: (f / "modules.json").write_text(json.dumps(
        [{"path": "", "type": "sentence_transformers.models.Transformer"},
         {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}])),
     r"modules include \['Dense'\], which chunktree does not build"),
    (lambda f: (f / "model.safetensors").write_bytes(b"not safetensors"), r"not readable safetensors weights"),
])
def test_what_cannot_be_built_is_named(tmp_path, damage, message):
    folder = write_model_folder(tmp_path / "m")
    damage(folder)
    with pytest.raises(InvalidValueError, match=message):
        Embedder(folder)


def test_a_folder_is_built_once_and_again_when_its_weights_change(tmp_path, caplog):
    import logging

    folder = write_model_folder(tmp_path / "m", seed=0)
    with caplog.at_level(logging.WARNING):
        first = Embedder(folder).embed(["the whale"])
        again = Embedder(folder).embed(["the whale"])
    assert caplog.text.count("building the ONNX graph of m") == 1
    np.testing.assert_array_equal(first, again)
    write_model_folder(tmp_path / "m", seed=1)  # new weights in the same folder
    assert np.abs(Embedder(folder).embed(["the whale"]) - first).max() > 1e-3
    assert source.HUB_ID.fullmatch("BAAI/bge-small-en-v1.5") and not source.HUB_ID.fullmatch("bge")


def test_the_cli_orders_with_a_folder_model_and_lists_it(tmp_path, cli):
    folder = write_model_folder(tmp_path / "tiny-bge", "bert", "cls", prompts={"query": "query: "})
    r = cli("order", "examples/notes", "-q", "bread", "--no-cache", "--model", folder, "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["embedding"]["model"].startswith("tiny-bge@sha256:")
    r = cli("models", "--format", "json")
    (row,) = [m for m in json.loads(r.stdout)["models"] if m["name"] == "tiny-bge"]
    assert (row["dim"], row["window"], row["pooling"], row["prompts"]) == (32, 64, "cls", {"query": "query: "})
    r = cli("models")
    assert "tiny-bge  [built] dim 32, window 64, cls pooling, prompts query: 'query: '; ready" in r.stdout
    r = cli("order", "examples/notes", "-q", "bread", "--no-cache", "--model", "nobody/nothing")
    assert r.returncode == 2 and "HF_HUB_OFFLINE is set" in r.stderr


def test_a_document_prompt_that_would_overflow_the_window_shortens_the_chunks_aloud(tmp_path, cli, caplog):
    folder = write_model_folder(tmp_path / "e5ish", prompts={"document": "passage: "}, max_seq_length=32)
    r = cli("embed", "examples/notes", "-o", tmp_path / "x.npy", "--no-cache", "--model", folder, "--chunk-tokens", "32",
            "--overlap", "4")
    assert r.returncode == 0, r.stderr
    assert "--chunk-tokens 32 plus the model's document prompt 'passage: ' (2 tokens) passes its 32-token window: " \
           "chunks are cut to 30 tokens" in caplog.text
    e = Embedder(folder)
    rows = [json.loads(line) for line in (tmp_path / "x.jsonl").read_text(encoding="utf-8").splitlines()]
    assert max(len(e.tokenizer.encode("passage: " + row["text"]).ids) for row in rows) <= 32
