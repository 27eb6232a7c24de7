#!/bin/sh
# make_retrieval.sh - train, export, check and evaluate models/nexus-retrieval from scratch.
# Tool-time only (needs Debian's python3-torch; CI does not retrain). CPU, 1 thread, seed 1.
# Usage: scripts/train/make_retrieval.sh [WORKDIR] [STOP_STEP]  (from the repository root,
# after make). The committed model stopped at step STOP_STEP (see models/nexus-retrieval/README.md).
set -eu
W=${1:-build/train}
STOP=${2:-0}
M=models/nexus-retrieval
PY=/usr/bin/python3
mkdir -p "$W" "$M"
nice -n 19 $PY scripts/train/train_retrieval.py --out "$W/retr" --seed 1 --threads 1 \
    --stop-step "$STOP"
$PY scripts/train/build_gguf.py --ckpt "$W/retr.ckpt" --name nexus-retrieval --ctx 4096 \
    -o "$M/nexus-retrieval.gguf" --curve-out "$M/curve.json" \
    --meta '{"script": "scripts/train/train_retrieval.py", "seed": 1, "threads": 1}'
$PY scripts/train/plot_curve.py "$M/curve.json" "$M/curve.svg" loss token_acc
# torch's logits on held-out instances: tests/test_import.c holds the engine to them
$PY scripts/train/evaluate.py --ckpt "$W/retr.ckpt" --write-ref "$M/torch_ref.json" \
    --lengths 512 --n 2
# accuracy by context length, dense and local-only (torch), and engine vs torch answers
nice -n 19 $PY scripts/train/evaluate.py --ckpt "$W/retr.ckpt" --lengths 512,1024,2048,4096 \
    --n 16 --nexus ./build/nexus --gguf "$M/nexus-retrieval.gguf" --engine-len 2048 \
    --engine-n 1 --json "$M/quality.json"
# policies at density 0.2 on held-out 4K instances (budget fixed at 0.2 x prompt)
$PY scripts/train/evaluate.py --ckpt "$W/retr.ckpt" --write-tasks "$W/tasks4096.jsonl" \
    --lengths 4096 --n 8
nice -n 19 ./build/nexus task-eval -m "$M/nexus-retrieval.gguf" --tasks "$W/tasks4096.jsonl" \
    --policies full,streaming,h2o,snapkv,pyramidkv,adakv,morphkv,tova,nexus --densities 0.2 \
    --json "$M/policies_d0.2.json"
