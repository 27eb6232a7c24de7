#!/usr/bin/env bash
# figures.sh - the README's speed figures of issues 11, 13 and 16 in one run, for a quiet
# machine (nothing else running: the script records the load average before each part).
#
# Parts (each skippable with SKIP="parallel serve agent toolpath side" entries):
#   parallel  bench/parallel_side_by_side.sh: nexus bench --parallel 1,2,4,8 against
#             llama-batched-bench -npl 1,2,4,8 on the Llama-3.2-1B-shaped Q4_K_M file,
#             alternating, REPS_PAR rounds                                     (~6 min)
#   serve     bench/serve_bench.py throughput: nexus serve against llama-server, 8 slots, 2
#             threads, 1/4/8 clients, 2 rounds alternating                     (~6 min)
#   agent     bench/serve_bench.py agent workload on a 57M-parameter Llama-shaped Q4_K_M file
#             (4 sessions x 20 turns to ~8.7K tokens): nexus dense sessions, nexus sessions
#             under nexus eviction at a 1536-token budget, llama-server          (~3 min)
#   toolpath  nexus eval-toolpath --static-once on a Qwen2.5-0.5B-shaped Q8_0 file, N =
#             TOOLPATH_SIZES (10,50,100,250), TOOLPATH_QUERIES (2) queries, then on the
#             Llama-3.2-1B-shaped Q8_0 file, N = TOOLPATH_LLAMA_SIZES (10,50,100)
#             (~20 + ~12 min; the 30K-token all-schemas prefill at N = 250 is most of it)
#   side      bench/side_by_side.sh (issue 16's table), REPS_SIDE rounds  (~14-36 min)
# Models (written once if missing): /tmp/models/llama1b-{f16,q8_0,q4km}.gguf and
# /tmp/models/agent56m-q4km.gguf, from `nexus mkmodel` + llama.cpp's llama-quantize.
# Environment: LLAMA_BIN (/work/llama.cpp-build/bin), LLAMA_LIB (/work/llama.cpp-build-noamx/bin
# plus its parent: the native build's AMX path crashes), OUT (bench/results), REPS_PAR (2),
# REPS_SIDE (2), LABEL ("quiet machine").
set -euo pipefail
LLAMA_BIN=${LLAMA_BIN:-/work/llama.cpp-build/bin}
LLAMA_LIB=${LLAMA_LIB:-/work/llama.cpp-build-noamx:/work/llama.cpp-build-noamx/bin}
OUT=${OUT:-bench/results}
M=${MODELS_DIR:-/tmp/models}
REPS_PAR=${REPS_PAR:-2}
REPS_SIDE=${REPS_SIDE:-2}
LABEL=${LABEL:-quiet machine}
SKIP=${SKIP:-}
NEXUS=./build/nexus
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s, load $(cut -d' ' -f1-3 /proc/loadavg)] $*"; }
skip() { [[ " $SKIP " == *" $1 "* ]]; }

mkdir -p "$M"
if [ ! -f "$M/llama1b-f16.gguf" ]; then
  $NEXUS mkmodel -o "$M/llama1b-f16.gguf" --preset llama-3.2-1b --type f16 -q
fi
for q in q8_0:Q8_0 q4km:Q4_K_M; do
  f="$M/llama1b-${q%%:*}.gguf"
  [ -f "$f" ] || LD_LIBRARY_PATH=$LLAMA_LIB "$LLAMA_BIN/llama-quantize" "$M/llama1b-f16.gguf" "$f" "${q#*:}" >/dev/null
done
if [ ! -f "$M/agent56m-q4km.gguf" ]; then
  $NEXUS mkmodel -o "$M/agent56m-f16.gguf" --arch llama --layers 8 --embd 512 --heads 8 \
    --heads-kv 2 --head-dim 64 --ff 1536 --ctx 32768 --type f16 --seed 7 --rope-base 500000 \
    --tokenizer ../shared/models/llama-2-tiny-random/llama-2-tiny-random.gguf --name agent56m -q
  LD_LIBRARY_PATH=$LLAMA_LIB "$LLAMA_BIN/llama-quantize" "$M/agent56m-f16.gguf" "$M/agent56m-q4km.gguf" Q4_K_M >/dev/null
fi

if ! skip parallel; then
  say "parallel (issue 11)"
  REPS=$REPS_PAR MODEL="$M/llama1b-q4km.gguf" LLAMA_BIN=$LLAMA_BIN LLAMA_LIB=$LLAMA_LIB \
    OUT="$OUT/parallel" bench/parallel_side_by_side.sh
fi

if ! skip serve; then
  say "serve throughput"
  python3 bench/serve_bench.py -m "$M/llama1b-q4km.gguf" --slots 8 --threads 2 --ctx 1024 \
    --clients 1,4,8 --requests 2 --prompt-words 150 --gen 32 --rounds 2 \
    --server "nexus=nexus:" --server "llama=llama:" --llama-server "$LLAMA_BIN/llama-server" \
    --llama-lib "$LLAMA_LIB" --out "$OUT/serve/throughput_np8"
fi

if ! skip agent; then
  say "serve agent workload"
  python3 bench/serve_bench.py -m "$M/agent56m-q4km.gguf" --slots 4 --threads 2 --ctx 16384 \
    --clients "" --sessions 4 --turns 20 --tool-words 400 --agent-gen 8 --nexus-session \
    --server "nexus-dense=nexus:--sessions 4 --kv-policy full" \
    --server "nexus-evict=nexus:--sessions 4 --kv-policy nexus --kv-budget 1536" \
    --server "llama=llama:" --reference nexus-dense --llama-server "$LLAMA_BIN/llama-server" \
    --llama-lib "$LLAMA_LIB" --out "$OUT/serve/agent_np4"
fi

if ! skip toolpath; then
  [ -f "$M/qwen05b-q8_0.gguf" ] || $NEXUS mkmodel -o "$M/qwen05b-q8_0.gguf" --arch qwen2 \
    --layers 24 --embd 896 --heads 14 --heads-kv 2 --head-dim 64 --ff 4864 --tied \
    --rope-base 1000000 --ctx 32768 --type q8_0 -q \
    --tokenizer ../shared/models/vocab/ggml-vocab-qwen2.gguf
  mkdir -p "$OUT/toolpath"
  say "eval-toolpath: Qwen2.5-0.5B shape"
  $NEXUS eval-toolpath -m "$M/qwen05b-q8_0.gguf" -t 2 --sizes ${TOOLPATH_SIZES:-10,50,100,250} \
    --queries ${TOOLPATH_QUERIES:-2} --static-once --reps ${TOOLPATH_REPS:-5} --json "$OUT/toolpath/qwen05b.json" \
    --svg "$OUT/toolpath/qwen05b.svg" | tee "$OUT/toolpath/qwen05b.md"
  say "eval-toolpath: Llama-3.2-1B shape"
  $NEXUS eval-toolpath -m "$M/llama1b-q8_0.gguf" -t 2 --sizes ${TOOLPATH_LLAMA_SIZES:-10,50,100} \
    --queries ${TOOLPATH_QUERIES:-2} --static-once --reps ${TOOLPATH_REPS:-5} --json "$OUT/toolpath/llama1b.json" \
    --svg "$OUT/toolpath/llama1b.svg" | tee "$OUT/toolpath/llama1b.md"
fi

if ! skip side; then
  say "side by side (issue 16)"
  REPS=$REPS_SIDE LABEL="$LABEL" LLAMA_BIN=$LLAMA_BIN LLAMA_LIB=/work/llama.cpp-build-noamx/bin \
    OUT="$OUT/side_by_side" bench/side_by_side.sh
fi
say "done"
