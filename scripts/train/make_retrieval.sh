#!/bin/sh
# make_retrieval.sh - train, export, check and evaluate models/nexus-retrieval from scratch.
# Tool-time only (needs Debian's python3-torch; CI does not retrain). CPU, 1 thread, seed 1.
# Usage: scripts/train/make_retrieval.sh [WORKDIR]   (run from the repository root, after make)
set -eu
W=${1:-build/train}
M=models/nexus-retrieval
PY=/usr/bin/python3
mkdir -p "$W" "$M"
nice -n 19 $PY scripts/train/train_retrieval.py --out "$W/retr" --seed 1 --threads 1
cp "$W/retr.curve.json" "$M/curve.json"
$PY scripts/train/plot_curve.py "$M/curve.json" "$M/curve.svg" loss token_acc
$PY scripts/train/build_gguf.py --ckpt "$W/retr.ckpt" --curve "$M/curve.json" \
    --name nexus-retrieval --ctx 4096 -o "$M/nexus-retrieval.gguf"
# torch vs engine on the exported file (the C test tests/test_import.c re-checks torch_ref.json)
$PY scripts/train/evaluate.py --ckpt "$W/retr.ckpt" --curve "$M/curve.json" \
    --write-ref "$M/torch_ref.json" --lengths 512 --n 2
nice -n 19 $PY scripts/train/evaluate.py --ckpt "$W/retr.ckpt" --curve "$M/curve.json" \
    --lengths 512,1024,2048,4096 --n 32 --nexus ./build/nexus --gguf "$M/nexus-retrieval.gguf" \
    --engine-len 2048 --engine-n 2 --json "$M/quality.json"
# policies at density 0.2 on held-out 4K instances (budget fixed at 0.2 x prompt)
$PY scripts/train/evaluate.py --ckpt x --curve x --write-tasks "$W/tasks4096.jsonl" \
    --lengths 4096 --n 16
nice -n 19 ./build/nexus task-eval -m "$M/nexus-retrieval.gguf" --tasks "$W/tasks4096.jsonl" \
    --policies full,streaming,h2o,snapkv,pyramidkv,adakv,tova,nexus --densities 0.2 \
    --json "$M/policies_d0.2.json"
