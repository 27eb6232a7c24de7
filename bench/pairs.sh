#!/usr/bin/env bash
# pairs.sh - one test of the issue-16 table (decode tgTG, or prefill ppPP when PP > 0), Nexus
# against llama.cpp, many short paired rounds: for rows where a shared host's speed drifts
# between minutes (side_by_side.sh's rounds are minutes apart; these are seconds apart).
#
# Per round and model: llama-bench -m F -t THREADS -p PP -n TG -r 1 -o json and
# nexus bench -m F -t THREADS -p PP -n TG -r 1 --json --no-bandwidth (decode: PP = 0; prefill:
# TG = 0), back to back, the engine that goes first alternating from round to round. Per
# model: each engine's median t/s
# (min-max), the median of the per-round ratios Nexus / llama.cpp with a distribution-free 95%
# confidence interval for it (order statistics of the sorted ratios, binomial; needs >= 6
# rounds), and how many rounds Nexus was faster.
#
# Output: OUT/pairs.json (every figure of every round), OUT/pairs.md (the table and the
# command); raw tool outputs in OUT/raw/ (a rerun skips runs whose output is there).
#
# Usage: bench/pairs.sh [MODEL.gguf ...]   (from the repository root, after `make`)
# Environment (defaults): LLAMA_BIN (/work/llama.cpp-build/bin), LLAMA_LIB (unset; see
#   side_by_side.sh), NEXUS (./build/nexus), THREADS (2), PP (0), TG (64; 0 when PP > 0),
#   REPS (10), OUT (bench/results/pairs), LABEL (free text for the table); NX_KERNELS is
#   passed on. Duration on Zen 5: ~30 s per round for the three 1B files (tg64).
set -euo pipefail

LLAMA_BIN=${LLAMA_BIN:-/work/llama.cpp-build/bin}
NEXUS=${NEXUS:-./build/nexus}
THREADS=${THREADS:-2}
PP=${PP:-0}
if [ "$PP" -gt 0 ]; then TG=${TG:-0}; else TG=${TG:-64}; fi
[ "$PP" -gt 0 ] && [ "$TG" -gt 0 ] && { echo "pairs: one test a run: PP or TG" >&2; exit 1; }
REPS=${REPS:-10}
OUT=${OUT:-bench/results/pairs}
LABEL=${LABEL:-}
if [ $# -gt 0 ]; then MODELS="$*"; fi
MODELS=${MODELS:-/tmp/models/llama1b-q4km.gguf /tmp/models/llama1b-q8_0.gguf /tmp/models/llama1b-f16.gguf}

for f in $MODELS; do [ -f "$f" ] || { echo "pairs: no model $f" >&2; exit 1; }; done
[ -x "$LLAMA_BIN/llama-bench" ] || { echo "pairs: no $LLAMA_BIN/llama-bench" >&2; exit 1; }
[ -x "$NEXUS" ] || { echo "pairs: no $NEXUS (run make)" >&2; exit 1; }
raw=$OUT/raw
mkdir -p "$raw"
t_start=$(date +%s)

run_llama() { # model tag
    local o="$raw/llama.$2.json"
    [ -s "$o" ] && return 0
    LD_LIBRARY_PATH="${LLAMA_LIB:+$LLAMA_LIB:}${LD_LIBRARY_PATH:-}" "$LLAMA_BIN/llama-bench" -m "$1" \
        -t "$THREADS" -p "$PP" -n "$TG" -r 1 -o json > "$o.tmp" 2> "$raw/llama.$2.log"
    mv "$o.tmp" "$o"
}
run_nexus() { # model tag
    local o="$raw/nexus.$2.json"
    [ -s "$o" ] && return 0
    "$NEXUS" bench -m "$1" -t "$THREADS" -p "$PP" -n "$TG" -r 1 --json --no-bandwidth \
        > "$o.tmp" 2> "$raw/nexus.$2.log"
    mv "$o.tmp" "$o"
}

for r in $(seq 1 "$REPS"); do
    for f in $MODELS; do
        tag="$(basename "$f" .gguf).r$r"
        [ -s "$raw/load.$tag" ] || uptime > "$raw/load.$tag"
        if [ $((r % 2)) -eq 1 ]; then run_llama "$f" "$tag"; run_nexus "$f" "$tag"
        else run_nexus "$f" "$tag"; run_llama "$f" "$tag"; fi
    done
    echo "pairs: round $r/$REPS done ($(( $(date +%s) - t_start )) s)" >&2
done

CMD="THREADS=$THREADS PP=$PP TG=$TG REPS=$REPS${NX_KERNELS:+ NX_KERNELS=$NX_KERNELS}"
[ "$LLAMA_BIN" = /work/llama.cpp-build/bin ] || CMD="$CMD LLAMA_BIN=$LLAMA_BIN"
CMD="$CMD${LLAMA_LIB:+ LLAMA_LIB=$LLAMA_LIB} bench/pairs.sh $MODELS"
/usr/bin/python3 - "$raw" "$OUT" "$REPS" "$PP" "$TG" "$LABEL" "$CMD" $MODELS <<'EOF'
import json, math, os, statistics as st, sys
raw, out, reps, pp, tg, label, cmd = (sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
                                      int(sys.argv[5]), sys.argv[6], sys.argv[7])
models = [os.path.basename(m)[:-5] for m in sys.argv[8:]]
test = f"pp{pp}" if pp > 0 else f"tg{tg}"

def median_ci(xs):
    """Distribution-free 95% interval for the median: sorted xs[j], xs[n-1-j] with the largest j
    such that P(Binomial(n, 1/2) <= j) <= 0.025 (None below 6 values)."""
    n, xs = len(xs), sorted(xs)
    j, cdf = -1, 0.0
    for i in range(n):
        cdf += math.comb(n, i) / 2 ** n
        if cdf > 0.025: break
        j = i
    return None if j < 0 else (xs[j], xs[n - 1 - j])

res, rows = {"test": test, "reps": reps, "command": cmd, "models": {}}, []
for m in models:
    L, N, R = [], [], []
    for r in range(1, reps + 1):
        lj = json.load(open(f"{raw}/llama.{m}.r{r}.json"))
        nj = json.load(open(f"{raw}/nexus.{m}.r{r}.json"))
        l = next(x["avg_ts"] for x in lj if (x["n_prompt"] if pp > 0 else x["n_gen"]) > 0)
        n = nj["pp_tps"] if pp > 0 else nj["tg_tps"]
        L.append(l); N.append(n); R.append(n / l)
    ci = median_ci(R)
    res["models"][m] = {"llama_tps": L, "nexus_tps": N, "ratios": R, "median_ratio": st.median(R),
                        "ratio_ci95": ci, "nexus_faster_rounds": sum(x > 1 for x in R)}
    rows.append("| %s | %.2f (%.2f-%.2f) | %.2f (%.2f-%.2f) | %.3f | %s | %d of %d |" % (
        m, st.median(L), min(L), max(L), st.median(N), min(N), max(N), st.median(R),
        "%.3f-%.3f" % ci if ci else "n/a", res["models"][m]["nexus_faster_rounds"], reps))
json.dump(res, open(f"{out}/pairs.json", "w"), indent=1)
md = [f"{test}, Nexus against llama.cpp, {reps} paired rounds seconds apart{', ' + label if label else ''}:",
      "", "| model | llama.cpp t/s | Nexus t/s | median paired ratio | 95% CI of the median ratio | Nexus faster |",
      "|---|---|---|---|---|---|"] + rows + ["", f"Command: `{cmd}`", ""]
open(f"{out}/pairs.md", "w").write("\n".join(md))
print("\n".join(md))
EOF
