#!/bin/bash
# bench/small_threads.sh - issue 16 (5): small models must not get slower with more threads.
# Interleaved, REPS alternating rounds of 1 and 2 threads (order flipped every round):
#   stories260K  `nexus run` (greedy, N tokens from a short prompt)
#   a MiniLM-shaped encoder (`nexus mkmodel --arch bert --layers 6 --embd 384 --heads 12
#     --ff 1536 --ctx 512 --type f16`, 22.57 M parameters) `nexus embed` on TEXTS texts
# Wall time per command (ms), medians, ratio t1/t2 (>= 1.0: 2 threads at least as fast) and the
# paired per-round ratios. Writes $OUT/small_threads.json.
# usage: REPS=7 N=200 bench/small_threads.sh
set -euo pipefail
cd "$(dirname "$0")/.."
NEXUS=${NEXUS:-./build/nexus}
REPS=${REPS:-7}
N=${N:-200}
TEXTS=${TEXTS:-20}
OUT=${OUT:-bench/results/small_threads}
STORIES=${STORIES:-../shared/models/stories260K/stories260K.gguf}
ENC=${ENC:-/tmp/minilm-f16.gguf}
mkdir -p "$OUT"
if [ ! -f "$ENC" ]; then
    "$NEXUS" mkmodel -o "$ENC" --arch bert --layers 6 --embd 384 --heads 12 --ff 1536 --ctx 512 \
        --type f16 --tokenizer ../shared/models/vocab/ggml-vocab-bert-bge.gguf >/dev/null
fi
texts=()
for i in $(seq 1 "$TEXTS"); do texts+=("text number $i about a tool that reads files and lists a directory"); done
ms() { local t0 t1; t0=$(date +%s%N); "$@" >/dev/null 2>&1; t1=$(date +%s%N); echo $(((t1 - t0) / 1000000)); }
rows=()
for r in $(seq 1 "$REPS"); do
    if [ $((r % 2)) -eq 1 ]; then order="1 2"; else order="2 1"; fi
    for t in $order; do
        a=$(ms "$NEXUS" run -m "$STORIES" -p "Once upon a time" -n "$N" --temp 0 -t "$t")
        b=$(ms "$NEXUS" embed -m "$ENC" -t "$t" "${texts[@]}")
        rows+=("$r $t $a $b")
        echo "round $r threads $t: stories260K run ${a} ms, MiniLM embed ${b} ms" >&2
    done
done
printf '%s\n' "${rows[@]}" | /usr/bin/python3 -c '
import json, statistics as st, sys, os
rows = [tuple(map(int, l.split())) for l in sys.stdin if l.strip()]
res = {}
for name, col in (("stories260K run", 2), ("MiniLM-shaped embed", 3)):
    t1 = {r[0]: r[col] for r in rows if r[1] == 1}
    t2 = {r[0]: r[col] for r in rows if r[1] == 2}
    pair = sorted(t1[k] / t2[k] for k in t1 if t2.get(k))
    res[name] = {"ms_1_thread": list(t1.values()), "ms_2_threads": list(t2.values()),
                 "median_1": st.median(t1.values()), "median_2": st.median(t2.values()),
                 "paired_ratio_1_over_2": pair, "median_paired_ratio": st.median(pair)}
    print("| %s | %.0f | %.0f | %.2f (%.2f-%.2f) |" % (name, st.median(t1.values()),
          st.median(t2.values()), st.median(pair), pair[0], pair[-1]))
res["load_avg"] = os.getloadavg()
json.dump(res, open(sys.argv[1], "w"), indent=1)
' "$OUT/small_threads.json"
