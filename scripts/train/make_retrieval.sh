#!/bin/sh
# make_retrieval.sh - train, export, check and evaluate models/nexus-retrieval from scratch.
# Tool-time only (needs Debian's python3-torch; CI does not retrain). CPU, 1 thread, seed 1.
# Usage: scripts/train/make_retrieval.sh [WORKDIR] [STOP2] [STOP3]  (from the repository root,
# after make). Three phases (models/nexus-retrieval/README.md):
#   1. the 64 -> 128 -> 256 token curriculum, cut at step 900 of its 1500-step schedule
#      (= models/nexus-retrieval/phase1-step900.gguf, committed so phase 2 can start from it);
#   2. from those weights, 1024-token instances (2 per step) on a 330-step schedule, cut at
#      step STOP2 (150: = phase2-step150.gguf, the 1K model, committed; 0 = the whole schedule);
#   3. from phase 2's weights, 2048-token instances (1 per step) on a 300-step schedule, cut at
#      step STOP3 (the committed nexus-retrieval.gguf, full context 2K: see the README).
# PHASE1=skip starts phase 2 from the committed phase-1 file; PHASE2=skip (implies PHASE1=skip)
# starts phase 3 from the committed phase-2 file. A phase cut short resumes with --resume.
set -eu
W=${1:-build/train}
STOP2=${2:-150}
STOP3=${3:-0}
M=models/nexus-retrieval
PY=/usr/bin/python3
mkdir -p "$W" "$M/eval"
if [ "${PHASE1:-}" != skip ] && [ "${PHASE2:-}" != skip ]; then
    nice -n 19 $PY scripts/train/train_retrieval.py --out "$W/retr" --seed 1 --threads 1 \
        --stop-step 900
    $PY scripts/train/build_gguf.py --ckpt "$W/retr.ckpt" --name nexus-retrieval --ctx 4096 \
        -o "$W/phase1.gguf"
    cmp "$W/phase1.gguf" "$M/phase1-step900.gguf" || echo "note: phase 1 differs from the committed file"
fi
if [ "${PHASE2:-}" != skip ]; then
    nice -n 19 $PY scripts/train/train_retrieval.py --out "$W/retr2" --seed 1 --threads 1 \
        --init-gguf "$M/phase1-step900.gguf" --stages 1024:2:330 --phase-tag 2 --lr 1.5e-3 \
        --warmup 30 --task-probs 0.4,0.25,0.35 --ckpt-every 30 --stop-step "$STOP2"
    $PY scripts/train/build_gguf.py --ckpt "$W/retr2.ckpt" --name nexus-retrieval --ctx 4096 \
        -o "$W/phase2.gguf" --curve-out "$M/curve_phase2.json" \
        --meta '{"script": "scripts/train/train_retrieval.py", "seed": 1, "threads": 1, "phase": 2, "init": "phase1-step900.gguf", "stages": [[1024, 2, 330]], "lr": 0.0015, "warmup": 30, "task_probs": [0.4, 0.25, 0.35]}'
    $PY scripts/train/plot_curve.py "$M/curve_phase2.json" "$M/curve_phase2.svg" loss token_acc
    cmp "$W/phase2.gguf" "$M/phase2-step150.gguf" || echo "note: phase 2 differs from the committed file"
fi
# phase 3: from phase 2's weights (the 1K model), 2048-token instances, one per step, more VT
nice -n 19 $PY scripts/train/train_retrieval.py --out "$W/retr3" --seed 1 --threads 1 \
    --init-gguf "$M/phase2-step150.gguf" --stages 2048:1:300 --phase-tag 3 --lr 1e-3 \
    --warmup 20 --task-probs 0.35,0.2,0.45 --ckpt-every 25 --stop-step "$STOP3"
$PY scripts/train/build_gguf.py --ckpt "$W/retr3.ckpt" --name nexus-retrieval --ctx 4096 \
    -o "$M/nexus-retrieval.gguf" --curve-out "$M/curve.json" \
    --meta '{"script": "scripts/train/train_retrieval.py", "seed": 1, "threads": 1, "phase": 3, "init": "phase2-step150.gguf", "stages": [[2048, 1, 300]], "lr": 0.001, "warmup": 20, "task_probs": [0.35, 0.2, 0.45]}'
$PY scripts/train/plot_curve.py "$M/curve.json" "$M/curve.svg" loss token_acc
# torch's logits on held-out 2K instances (one per task): tests/test_import.c holds the engine
# to them, tests/test_task_eval.c takes them as its oracle
$PY scripts/train/evaluate.py --ckpt "$W/retr3.ckpt" --write-ref "$M/torch_ref.json" \
    --lengths 2048 --n 1
# engine accuracy by context length, dense and local-only (streaming at 0.2), held-out
for L in 512 1024 2048 4096; do
    $PY scripts/train/evaluate.py --ckpt x --write-tasks "$W/tasks$L.jsonl" --lengths $L --n 32
    nice -n 19 ./build/nexus task-eval -m "$M/nexus-retrieval.gguf" --tasks "$W/tasks$L.jsonl" \
        --policies full,streaming --densities 0.2 -t 2 --json "$M/eval/dense_local_$L.json"
done
# every policy and the bounds at densities 0.1 / 0.2 / 0.4 on 66 held-out 2K instances, both
# regimes (prefill: compressed once at the prompt's end; stream: evicting as the prompt arrives
# token by token), budget fixed at density x prompt, query-agnostic (the prompt ends before the
# queries)
P=full,random,bottomk,oracle,oracle/values,streaming,h2o,snapkv,pyramidkv,adakv,morphkv,tova,nexus,nexus/topk,nexus/fresh,nexus/perhead,nexus/matchkv
$PY scripts/train/evaluate.py --ckpt x --write-tasks "$W/tasks2048_66.jsonl" --lengths 2048 --n 22
nice -n 19 ./build/nexus task-eval -m "$M/nexus-retrieval.gguf" --tasks "$W/tasks2048_66.jsonl" \
    --policies $P --densities 0.1,0.2,0.4 --regimes prefill,stream --seeds 3 -t 2 \
    --json "$M/eval/policies_2048.json" --svg "$M/eval/policies_2048.svg" > "$M/eval/policies_2048.md"
# the same, paired against Nexus (each policy - Nexus, with SE)
nice -n 19 ./build/nexus task-eval -m "$M/nexus-retrieval.gguf" --tasks "$W/tasks2048_66.jsonl" \
    --policies $P --densities 0.1,0.2,0.4 --regimes prefill,stream --seeds 3 -t 2 --reference nexus \
    --json "$M/eval/policies_2048_vs_nexus.json" > /dev/null
