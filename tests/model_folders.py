"""Tiny random sentence-transformers model folders, written the way a model on the Hugging Face hub
is laid out (config.json, model.safetensors, tokenizer.json, modules.json, 1_Pooling/config.json,
sentence_bert_config.json, config_sentence_transformers.json), for the tests of every family and
pooling chunktree builds."""

import json
from pathlib import Path

import numpy as np

WORDS = ("the whale ship sea captain white hunt ocean bread loaf flour water salt oven rise dough "
         "starter yeast proof bake crust crumb knife table chair window door house garden tree river "
         "mountain road car train station city town village market shop money bank paper book page").split()
SIZES = {"hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 48}


def _tokenizer(family):
    """A WordPiece tokenizer over WORDS with the family's special tokens and template."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    bert = family == "bert"
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] if bert else ["<s>", "<pad>", "</s>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials + WORDS + [f"##{w[-2:]}" for w in WORDS[:10]])}
    unk = "[UNK]" if bert else "<unk>"
    tok = Tokenizer(models.WordPiece(vocab, unk_token=unk))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    first, last = ("[CLS]", "[SEP]") if bert else ("<s>", "</s>")
    tok.post_processor = processors.TemplateProcessing(
        single=f"{first} $A {last}", pair=f"{first} $A {last} $B:1 {last}:1",
        special_tokens=[(first, vocab[first]), (last, vocab[last])])
    return tok, len(vocab), vocab["[PAD]" if bert else "<pad>"]


def _weights(family, vocab_size, positions, rng):
    h, i = SIZES["hidden_size"], SIZES["intermediate_size"]

    def t(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    w = {"embeddings.word_embeddings.weight": t(vocab_size, h),
         "embeddings.position_embeddings.weight": t(positions, h),
         "embeddings.LayerNorm.weight": 1 + t(h), "embeddings.LayerNorm.bias": t(h)}
    if family != "mpnet":
        w["embeddings.token_type_embeddings.weight"] = t(2 if family == "bert" else 1, h)
    else:
        w["encoder.relative_attention_bias.weight"] = t(32, SIZES["num_attention_heads"])
    for layer in range(SIZES["num_hidden_layers"]):
        p = f"encoder.layer.{layer}"
        if family == "mpnet":
            attention = {f"attention.attn.{n}": (h, h) for n in "qkvo"}
            attention["attention.LayerNorm"] = None
        else:
            attention = {f"attention.self.{n}": (h, h) for n in ("query", "key", "value")}
            attention["attention.output.dense"] = (h, h)
            attention["attention.output.LayerNorm"] = None
        for name, shape in {**attention, "intermediate.dense": (i, h), "output.dense": (h, i),
                            "output.LayerNorm": None}.items():
            if shape is None:  # a LayerNorm
                w[f"{p}.{name}.weight"], w[f"{p}.{name}.bias"] = 1 + t(h), t(h)
            else:
                w[f"{p}.{name}.weight"], w[f"{p}.{name}.bias"] = t(*shape), t(shape[0])
    if family == "mpnet":  # MPNetModel has a pooler too; sentence-transformers ignores it
        w["pooler.dense.weight"], w["pooler.dense.bias"] = t(h, h), t(h)
    return w


def write_model_folder(root, family="bert", pooling="mean", prompts=None, max_seq_length=64, seed=0,
                       sentence_transformers=True, matryoshka=False):
    """Write a tiny random model of ``family`` with ``pooling`` into ``root`` (``matryoshka``: a model
    card whose metadata names Matryoshka training); returns ``root``."""
    from safetensors.numpy import save_file

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tok, vocab_size, pad = _tokenizer(family)
    positions = 80 if family == "bert" else 80 + pad + 1
    config = {"model_type": family, "vocab_size": vocab_size, "max_position_embeddings": positions,
              "layer_norm_eps": 1e-5 if family != "bert" else 1e-12, "hidden_act": "gelu",
              "pad_token_id": pad, "type_vocab_size": 2 if family == "bert" else 1, **SIZES,
              "architectures": [{"bert": "BertModel", "xlm-roberta": "XLMRobertaModel", "roberta": "RobertaModel",
                                 "mpnet": "MPNetModel"}[family]]}
    if family == "mpnet":
        config["relative_attention_num_buckets"] = 32
    (root / "config.json").write_text(json.dumps(config), encoding="utf-8")
    tok.save(str(root / "tokenizer.json"))
    save_file(_weights(family, vocab_size, positions, np.random.default_rng(seed)), str(root / "model.safetensors"))
    if matryoshka:
        (root / "README.md").write_text("---\ntags:\n- sentence-transformers\n- loss:MatryoshkaLoss\n---\n# tiny\n",
                                        encoding="utf-8")
    if sentence_transformers:
        (root / "modules.json").write_text(json.dumps([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]),
            encoding="utf-8")
        (root / "1_Pooling").mkdir(exist_ok=True)
        flags = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens",
                 "lasttoken": "pooling_mode_lasttoken", "max": "pooling_mode_max_tokens"}
        (root / "1_Pooling" / "config.json").write_text(json.dumps(
            {"word_embedding_dimension": SIZES["hidden_size"], **{f: f == flags[pooling] for f in flags.values()}}),
            encoding="utf-8")
        (root / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length}),
                                                        encoding="utf-8")
        (root / "config_sentence_transformers.json").write_text(json.dumps({"prompts": prompts or {}}),
                                                                encoding="utf-8")
    return root


def texts(n=100, seed=1):
    """``n`` texts of 1 to 40 words (some unknown to the vocabulary), within a 64-token window."""
    rng = np.random.default_rng(seed)
    words = WORDS + ["zebra", "quux"]
    return [" ".join(rng.choice(words, size=int(rng.integers(1, 40)))) for _ in range(n)]
