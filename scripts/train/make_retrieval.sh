#!/bin/sh
# make_retrieval.sh - train, export, check and evaluate models/nexus-retrieval from scratch.
# Tool-time only (needs Debian's python3-torch; CI does not retrain). CPU, 1 thread, seed 1.
# Usage: scripts/train/make_retrieval.sh [WORKDIR] [STOP2]  (from the repository root, after
# make). Two phases (models/nexus-retrieval/README.md):
#   1. the 64 -> 128 -> 256 token curriculum, cut at step 900 of its 1500-step schedule
#      (= models/nexus-retrieval/phase1-step900.gguf, committed so phase 2 can start from it);
#   2. from those weights, 1024-token instances (2 per step) on a 330-step schedule, cut at
#      step STOP2 (the committed model: see the README; 0 = the whole schedule).
# PHASE1=skip starts phase 2 from the committed phase-1 file.
set -eu
W=${1:-build/train}
STOP2=${2:-0}
M=models/nexus-retrieval
PY=/usr/bin/python3
mkdir -p "$W" "$M/eval"
if [ "${PHASE1:-}" != skip ]; then
    nice -n 19 $PY scripts/train/train_retrieval.py --out "$W/retr" --seed 1 --threads 1 \
        --stop-step 900
    $PY scripts/train/build_gguf.py --ckpt "$W/retr.ckpt" --name nexus-retrieval --ctx 4096 \
        -o "$W/phase1.gguf"
    cmp "$W/phase1.gguf" "$M/phase1-step900.gguf" || echo "note: phase 1 differs from the committed file"
fi
nice -n 19 $PY scripts/train/train_retrieval.py --out "$W/retr2" --seed 1 --threads 1 \
    --init-gguf "$M/phase1-step900.gguf" --stages 1024:2:330 --phase-tag 2 --lr 1.5e-3 \
    --warmup 30 --task-probs 0.4,0.25,0.35 --ckpt-every 30 --stop-step "$STOP2"
$PY scripts/train/build_gguf.py --ckpt "$W/retr2.ckpt" --name nexus-retrieval --ctx 4096 \
    -o "$M/nexus-retrieval.gguf" --curve-out "$M/curve.json" \
    --meta '{"script": "scripts/train/train_retrieval.py", "seed": 1, "threads": 1, "phase": 2, "init": "phase1-step900.gguf", "stages": [[1024, 2, 330]], "lr": 0.0015, "warmup": 30, "task_probs": [0.4, 0.25, 0.35]}'
$PY scripts/train/plot_curve.py "$M/curve.json" "$M/curve.svg" loss token_acc
# torch's logits on held-out 1K instances: tests/test_import.c holds the engine to them
$PY scripts/train/evaluate.py --ckpt "$W/retr2.ckpt" --write-ref "$M/torch_ref.json" \
    --lengths 1024 --n 2
# engine accuracy by context length, dense and local-only (streaming at 0.2), held-out
for L in 512 1024 2048; do
    $PY scripts/train/evaluate.py --ckpt x --write-tasks "$W/tasks$L.jsonl" --lengths $L --n 32
    nice -n 19 ./build/nexus task-eval -m "$M/nexus-retrieval.gguf" --tasks "$W/tasks$L.jsonl" \
        --policies full,streaming --densities 0.2 -t 2 --json "$M/eval/dense_local_$L.json"
done
# every policy and the bounds at densities 0.1 / 0.2 / 0.4 on 66 held-out 1K instances, both
# regimes (prefill: compressed once at the prompt's end; stream: evicting as the prompt arrives
# token by token), budget fixed at density x prompt, query-agnostic (the prompt ends before the
# queries)
$PY scripts/train/evaluate.py --ckpt x --write-tasks "$W/tasks1024_66.jsonl" --lengths 1024 --n 22
nice -n 19 ./build/nexus task-eval -m "$M/nexus-retrieval.gguf" --tasks "$W/tasks1024_66.jsonl" \
    --policies full,random,bottomk,oracle,streaming,h2o,snapkv,pyramidkv,adakv,morphkv,tova,nexus,nexus/topk,nexus/fresh,nexus/perhead,nexus/matchkv \
    --densities 0.1,0.2,0.4 --regimes prefill,stream --seeds 3 -t 2 \
    --json "$M/eval/policies_1024.json" --svg "$M/eval/policies_1024.svg" > "$M/eval/policies_1024.md"
# the same, paired against Nexus (each policy - Nexus, with SE)
nice -n 19 ./build/nexus task-eval -m "$M/nexus-retrieval.gguf" --tasks "$W/tasks1024_66.jsonl" \
    --policies full,random,bottomk,oracle,streaming,h2o,snapkv,pyramidkv,adakv,morphkv,tova,nexus,nexus/topk,nexus/fresh,nexus/perhead,nexus/matchkv \
    --densities 0.1,0.2,0.4 --regimes prefill,stream --seeds 3 -t 2 --reference nexus \
    --json "$M/eval/policies_1024_vs_nexus.json" > /dev/null
