#!/bin/sh
# make_kjv.sh - train, export and evaluate models/nexus-kjv (a byte-level Llama language model
# on the King James Bible) from scratch. Tool-time only: needs Debian's python3-torch and
# bible-kjv + bible-kjv-text (apt-get install python3-torch bible-kjv bible-kjv-text); CI does
# not retrain. CPU, one torch thread, seed 1, nice 19.
# Usage: scripts/train/make_kjv.sh [WORKDIR] (from the repository root, after make).
# The committed model (ninth session) trains on 2048-token windows from the first step (the
# eighth session's retrain showed that a 256-token first stage leaves distances past 256
# unlearned when the long stage comes at a low learning rate). Its schedule was shortened once
# while it ran: steps 1-200 on --stages 2048:1:1300, then resumed from the step-200 checkpoint on
# 2048:1:1000 (the cosine over 1000 steps). Batches depend only on (seed, step), so the two
# commands below give the same weights.
set -eu
W=${1:-build/train}
M=models/nexus-kjv
PY=/usr/bin/python3
mkdir -p "$W" "$M/eval"
nice -n 19 $PY scripts/train/train_lm.py --out "$W/kjv" --seed 1 --threads 1 \
    --stages 2048:1:1300 --ckpt-every 25 --stop-step 200
nice -n 19 $PY scripts/train/train_lm.py --out "$W/kjv" --seed 1 --threads 1 \
    --stages 2048:1:1000 --ckpt-every 25 --resume
# BOS never occurs in training (windows start anywhere in the text): it gets the newline's
# embedding (id 13), so an engine stream (BOS first) starts like a new verse
$PY scripts/train/build_gguf.py --ckpt "$W/kjv.ckpt" --name nexus-kjv --ctx 2048 --bos-like 13 \
    -o "$M/nexus-kjv.gguf" --curve-out "$M/curve.json" \
    --meta '{"script": "scripts/train/train_lm.py", "seed": 1, "threads": 1, "stages_steps_1_200": [[2048, 1, 1300]], "stages": [[2048, 1, 1000]], "lr": 0.003, "bos_like": 13}'
$PY scripts/train/plot_curve.py "$M/curve.json" "$M/curve.svg" train_loss heldout_loss_256
# held-out perplexity by context length (torch): tokens 1024-2047 of 64 held-out 2048-token
# windows, full context against sink 4 + the last 64 / 256 / 1024 tokens
nice -n 19 $PY scripts/train/train_lm.py --out "$M/eval/ppl_by_context.json" --eval-ctx "$W/kjv.ckpt" \
    --eval-windows 64
# torch's logits on the first held-out stream: tests/test_import.c holds the engine to them
$PY scripts/train/train_lm.py --out "$M/torch_ref.json" --write-ref "$W/kjv.ckpt" --bos-like 13
# the held-out text (last 5% of the bytes) for the engine
$PY scripts/train/train_lm.py --out x --write-heldout "$W/kjv_heldout.txt"
# every policy, the Nexus variants and the bounds at densities 0.1 / 0.2 / 0.4, both regimes,
# budget fixed at density x prompt, 64 held-out streams of 2048 tokens (1024-token prompt)
nice -n 19 ./build/nexus eval -m "$M/nexus-kjv.gguf" --file "$W/kjv_heldout.txt" \
    --policies full,random,bottomk,oracle,oracle/values,streaming,h2o,snapkv,pyramidkv,adakv,morphkv,tova,nexus,nexus/topk,nexus/fresh,nexus/perhead,nexus/matchkv \
    --densities 0.1,0.2,0.4 --regimes prefill,stream --budgets prompt --streams 64 \
    --stream-len 2048 --kv-block 16 --kv-sink 16 --kv-recent 16 --seeds 2 --score-len 64 -t 2 \
    --json "$M/eval/policies_2048.json" --svg "$M/eval" > "$M/eval/policies_2048.md"
# the same grid (without the three variants) paired against Nexus: each policy - Nexus, with SE
nice -n 19 ./build/nexus eval -m "$M/nexus-kjv.gguf" --file "$W/kjv_heldout.txt" \
    --policies full,random,bottomk,oracle,streaming,h2o,snapkv,pyramidkv,adakv,morphkv,tova,nexus,nexus/topk \
    --densities 0.1,0.2,0.4 --regimes prefill,stream --budgets prompt --streams 64 \
    --stream-len 2048 --kv-block 16 --kv-sink 16 --kv-recent 16 --seeds 2 --score-len 64 -t 2 \
    --reference nexus --json "$M/eval/policies_2048_vs_nexus.json" > /dev/null
