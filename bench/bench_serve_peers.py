"""`chunktree serve` against the embedding servers this field's users run, on the same model and
texts, one at a time on the same machine: infinity-emb and a plain sentence-transformers service
(FastAPI, ``SentenceTransformer.encode`` per request). 1, 8, 32 and 128 concurrent keep-alive
clients, each sending single sentences or batches of 16 passages, for a fixed time each;
throughput counts answered requests, p50/p99 are over answered requests, and refusals (chunktree's
503 load shedding) are counted apart.

Opt-in, and the peers live in an environment of their own, kept out of chunktree's dependencies:

    python -m venv peers && peers/bin/pip install -c bench/peers-constraints.txt torch==2.13.0 \\
        "infinity-emb[server,optimum]==0.0.78" "sentence-transformers<4"
    CHUNKTREE_BENCH_PEERS_DIR=peers python -m pytest bench/bench_serve_peers.py

The models: the bundled all-MiniLM-L6-v2, and a 12-layer, 768-wide BERT with random weights (the
shape of bert-base, all-mpnet and bge-base) written by the benchmark with MiniLM's tokenizer; every
server loads the same folder. chunktree runs
its default (``--backend auto``); infinity runs its torch engine, because its optimum (ONNX)
engine does not start here: infinity-emb 0.0.78 with optimum 2.x cannot find the ONNX file of a
local model folder (it passes an absolute file name), and optimum 1.x does not import with torch
2.13, the CPU build this machine installs. The sentence-transformers service runs PyTorch fp32.

Goal: chunktree >= 2x infinity-emb's throughput with p99 no worse, at every client count and for
both request shapes.
"""

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from bench_serve import load
from conftest import summary

PEERS_DIR = os.environ.get("CHUNKTREE_BENCH_PEERS_DIR")  # the peers' virtual environment
PEERS = str(Path(PEERS_DIR) / "bin" / "python") if PEERS_DIR else None
pytestmark = pytest.mark.skipif(not PEERS, reason="opt-in: CHUNKTREE_BENCH_PEERS_DIR=PATH/TO/peers-venv")
CLIENTS = (1, 8, 32, 128)
MODELS = ("all-MiniLM-L6-v2", "random-bert-768")
SECONDS = 8.0
SENTENCE = "The old captain watched the grey whale rise slowly beside the ship at dawn today."
PASSAGE = ("The crew had been at sea for three months when the lookout first saw the spout. Nobody spoke as the "
           "captain climbed to the masthead, and for a long time he only watched the water, counting the breaths "
           "of the whale and the minutes between them, before he called the boats down.")
SHAPES = {"sentence": [SENTENCE], "16 passages": [f"{PASSAGE} ({i})" for i in range(16)]}
ST_SERVICE = '''
import sys, uvicorn
from fastapi import FastAPI
from sentence_transformers import SentenceTransformer
model = SentenceTransformer(sys.argv[1], device="cpu")
app = FastAPI()
@app.post("/v1/embeddings")
def embed(body: dict):
    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
    vectors = model.encode(texts, normalize_embeddings=True)
    return {"object": "list", "model": sys.argv[1],
            "data": [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]}
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
'''


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model_folder(model, tmp):
    """The folder of ``model``: the bundled MiniLM's, or a random bert-base-sized model written here."""
    import shutil

    from safetensors.numpy import save_file

    from chunktree.models.registry import DEFAULT_MODEL, weights_dir

    minilm = weights_dir(DEFAULT_MODEL)
    if model == "all-MiniLM-L6-v2":
        return minilm
    folder = tmp / model
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                 "sentence_bert_config.json", "modules.json"):
        shutil.copy(minilm / name, folder / name)
    shutil.copytree(minilm / "1_Pooling", folder / "1_Pooling")
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({**pooling, "word_embedding_dimension": 768}))
    h, inner, layers, vocab = 768, 3072, 12, 30522
    (folder / "config.json").write_text(json.dumps({
        "model_type": "bert", "architectures": ["BertModel"], "hidden_size": h, "num_attention_heads": 12,
        "num_hidden_layers": layers, "intermediate_size": inner, "max_position_embeddings": 512, "vocab_size": vocab,
        "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu", "pad_token_id": 0}))
    rng = np.random.default_rng(0)

    def t(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)

    w = {"embeddings.word_embeddings.weight": t(vocab, h), "embeddings.position_embeddings.weight": t(512, h),
         "embeddings.token_type_embeddings.weight": t(2, h), "embeddings.LayerNorm.weight": np.ones(h, np.float32),
         "embeddings.LayerNorm.bias": np.zeros(h, np.float32)}
    for i in range(layers):
        p = f"encoder.layer.{i}"
        for name, shape in (("attention.self.query", (h, h)), ("attention.self.key", (h, h)),
                            ("attention.self.value", (h, h)), ("attention.output.dense", (h, h)),
                            ("intermediate.dense", (inner, h)), ("output.dense", (h, inner))):
            w[f"{p}.{name}.weight"], w[f"{p}.{name}.bias"] = t(*shape), np.zeros(shape[0], np.float32)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[f"{p}.{norm}.weight"], w[f"{p}.{norm}.bias"] = np.ones(h, np.float32), np.zeros(h, np.float32)
    save_file(w, str(folder / "model.safetensors"))
    return folder


def _start(name, port, folder, model):
    """The server ``name`` on ``port`` serving ``model`` from ``folder``, and the path it embeds at."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if name == "chunktree":
        chosen = model if model == "all-MiniLM-L6-v2" else str(folder)  # the bundled model by its name
        cmd = [sys.executable, "-m", "chunktree", "serve", "--port", str(port), "--no-cache", "--model", chosen]
        path = "/v1/embeddings"
    elif name == "infinity-emb":
        infinity = str(Path(PEERS_DIR) / "bin" / "infinity_emb")
        cmd = [infinity, "v2", "--model-id", str(folder), "--served-model-name", model, "--engine",
               "torch", "--device", "cpu", "--port", str(port), "--batch-size", "32"]
        path = "/embeddings"
    else:
        cmd, path = [PEERS, "-c", ST_SERVICE, str(folder), str(port)], "/v1/embeddings"
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    body = {"input": [SENTENCE], "model": model}
    for _ in range(900):
        try:
            if httpx.post(url + path, json=body, timeout=30).status_code == 200:
                return proc, url, path
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"{name} did not start")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("models")
    return {model: _model_folder(model, tmp) for model in MODELS}


@pytest.mark.parametrize("server", ["chunktree", "infinity-emb", "sentence-transformers"])
@pytest.mark.parametrize("model", MODELS)
def test_server(results, folders, model, server):
    proc, url, path = _start(server, _port(), folders[model], model)
    try:
        for shape, texts in SHAPES.items():
            body = json.dumps({"input": texts, "model": model}).encode()
            for clients in CLIENTS:
                asyncio.run(load(url, clients, None, duration=2.0, body=body, path=path))  # warm up
                lat, refused, wall = asyncio.run(load(url, clients, None, duration=SECONDS, body=body, path=path,
                                                      ok_only=True))
                results[server][f"{model}: {shape}, {clients} client{'s' if clients > 1 else ''}"] = {
                    "rps": len(lat) / wall, "p50": float(np.median(lat)) if len(lat) else None,
                    "p99": float(np.percentile(lat, 99)) if len(lat) else None, "answered": len(lat),
                    "refused": refused}
    finally:
        proc.terminate()
        proc.wait(60)


@summary
def lines(results):
    out = []
    ours, infinity, st = results.get("chunktree", {}), results.get("infinity-emb", {}), results.get(
        "sentence-transformers", {})
    for case, r in ours.items():
        row = f"{case}: chunktree {r['rps']:.1f} req/s, p50 {1e3 * r['p50']:.0f} ms, p99 {1e3 * r['p99']:.0f} ms"
        row += f", {r['refused']} refused (503)" if r["refused"] else ""
        for name, peer in (("infinity-emb", infinity.get(case)), ("sentence-transformers", st.get(case))):
            if peer and peer["answered"]:
                row += (f"; {name} {peer['rps']:.1f} req/s, p99 {1e3 * peer['p99']:.0f} ms "
                        f"({r['rps'] / peer['rps']:.2f}x its throughput)")
        if infinity.get(case) and infinity[case]["answered"]:
            met = r["rps"] >= 2 * infinity[case]["rps"] and r["p99"] <= infinity[case]["p99"]
            row += f" [goal >= 2x infinity-emb, p99 no worse: {'met' if met else 'MISSED'}]"
        out.append(row)
    return out
