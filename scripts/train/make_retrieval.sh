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
# torch accuracy (dense / local-only mask) at 512 and 1K, and engine vs torch on 1K instances
nice -n 19 $PY scripts/train/evaluate.py --ckpt "$W/retr.ckpt" --lengths 512,1024 --n 8 \
    --nexus ./build/nexus --gguf "$M/nexus-retrieval.gguf" --engine-len 1024 --engine-n 1 \
    --json "$W/torch_quality.json"
# engine accuracy by context length, dense and local-only (streaming at 0.2), held-out
mkdir -p "$M/eval"
for L in 512 1024 2048 4096; do
    $PY scripts/train/evaluate.py --ckpt x --write-tasks "$W/tasks$L.jsonl" --lengths $L --n 8
    nice -n 19 ./build/nexus task-eval -m "$M/nexus-retrieval.gguf" --tasks "$W/tasks$L.jsonl" \
        --policies full,streaming --densities 0.2 --json "$M/eval/dense_local_$L.json"
done
# every policy at densities 0.2 and 0.4 on the 1K instances (budget fixed at density x prompt)
nice -n 19 ./build/nexus task-eval -m "$M/nexus-retrieval.gguf" --tasks "$W/tasks1024.jsonl" \
    --policies full,streaming,h2o,snapkv,pyramidkv,adakv,morphkv,tova,nexus \
    --densities 0.2,0.4 --json "$M/eval/policies_1024.json"
