#!/usr/bin/env bash
# side_by_side.sh - Nexus against llama.cpp on the same GGUF files: the whole issue-16 table in
# one interleaved run.
#
# Rows, for every model file: pp PP, tg TG, tg TG at depth DEPTH, pp PP at depth DEPTH.
# REPS rounds; in each round every model is run once by each engine, the engine that goes first
# alternating from one (round, model) to the next:
#   llama-bench -m F -t THREADS -p PP -n TG -d 0,DEPTH -r 1 -o json   (its 4 tests; llama.cpp's
#       defaults otherwise: F16 KV cache, flash attention auto)
#   nexus bench -m F -t THREADS -p PP -n TG --depth 0 -r 1 --json --no-bandwidth, then --depth DEPTH
# Each figure is the median over the rounds (min-max beside it); "ratio" is Nexus / llama.cpp of
# the medians, "paired" the median of the per-round ratios. A second table gives each engine's
# tg at depth DEPTH over its tg at depth 0. Timing runs are not niced; the load average is
# recorded before every round (say so with figures taken on a shared machine).
#
# Output: OUT/side_by_side.json (every figure of every round), OUT/side_by_side.md (the tables
# and the command), raw tool outputs in OUT/raw/ (a rerun skips runs whose output is there, so an
# interrupted run resumes; REPORT_ONLY=1 only rebuilds the tables from OUT/raw).
#
# Usage: bench/side_by_side.sh [MODEL.gguf ...]   (from the repository root, after `make`)
# Environment (defaults): LLAMA_BIN (/work/llama.cpp-build/bin), LLAMA_LIB (unset: a directory put
#   first in llama-bench's LD_LIBRARY_PATH, e.g. /work/llama.cpp-build-noamx/bin where the native
#   build's AMX path crashes), NEXUS (./build/nexus), THREADS (2), PP (512), TG (128),
#   DEPTH (4096), REPS (3), OUT (bench/results/side_by_side), LABEL (free text put in the
#   tables, e.g. "quiet machine" or "under load"),
#   MODELS (/tmp/models/llama1b-q4km.gguf /tmp/models/llama1b-q8_0.gguf /tmp/models/llama1b-f16.gguf).
# Duration: per round and model two fills of DEPTH tokens by llama-bench (one per depth test)
#   and one by Nexus, plus the timed tests: on a quiet 2-core machine about 20 minutes for the
#   defaults on the AVX-512 one, 36 for REPS=2 on the slower AVX2 one; the script prints the
#   elapsed time as it goes.
# The models: `nexus mkmodel --preset llama-3.2-1b --type f16`, then llama.cpp's llama-quantize
# to Q8_0 and Q4_K_M (so both engines read files written by llama.cpp's quantizer).
set -euo pipefail

LLAMA_BIN=${LLAMA_BIN:-/work/llama.cpp-build/bin}
NEXUS=${NEXUS:-./build/nexus}
THREADS=${THREADS:-2}
PP=${PP:-512}
TG=${TG:-128}
DEPTH=${DEPTH:-4096}
REPS=${REPS:-3}
OUT=${OUT:-bench/results/side_by_side}
LABEL=${LABEL:-}
if [ $# -gt 0 ]; then MODELS="$*"; fi
MODELS=${MODELS:-/tmp/models/llama1b-q4km.gguf /tmp/models/llama1b-q8_0.gguf /tmp/models/llama1b-f16.gguf}

for f in $MODELS; do [ -f "$f" ] || { echo "side_by_side: no model $f" >&2; exit 1; }; done
[ -x "$LLAMA_BIN/llama-bench" ] || { echo "side_by_side: no $LLAMA_BIN/llama-bench" >&2; exit 1; }
[ -x "$NEXUS" ] || { echo "side_by_side: no $NEXUS (run make)" >&2; exit 1; }
raw=$OUT/raw
mkdir -p "$raw"
t_start=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t_start )) s"; }

run_llama() { # model tag
    local o="$raw/llama.$2.json"
    [ -s "$o" ] && return 0
    echo "  llama.cpp $2 ($(elapsed))" >&2
    LD_LIBRARY_PATH="${LLAMA_LIB:+$LLAMA_LIB:}${LD_LIBRARY_PATH:-}" "$LLAMA_BIN/llama-bench" -m "$1" \
        -t "$THREADS" -p "$PP" -n "$TG" -d "0,$DEPTH" -r 1 -o json > "$o.tmp" 2> "$raw/llama.$2.log"
    mv "$o.tmp" "$o"
}
run_nexus() { # model tag
    local d
    for d in 0 "$DEPTH"; do
        local o="$raw/nexus.$2.d$d.json"
        [ -s "$o" ] && continue
        echo "  nexus $2 depth $d ($(elapsed))" >&2
        "$NEXUS" bench -m "$1" -t "$THREADS" -p "$PP" -n "$TG" --depth "$d" -r 1 --json \
            --no-bandwidth > "$o.tmp" 2> "$raw/nexus.$2.d$d.log"
        mv "$o.tmp" "$o"
    done
}

if [ "${REPORT_ONLY:-0}" != 1 ]; then
    k=0
    for r in $(seq 1 "$REPS"); do
        for f in $MODELS; do
            tag="$(basename "$f" .gguf).r$r"
            [ -s "$raw/load.$tag" ] || uptime > "$raw/load.$tag"
            echo "== round $r/$REPS $(basename "$f") ($(elapsed))" >&2
            if [ $((k % 2)) -eq 0 ]; then run_llama "$f" "$tag"; run_nexus "$f" "$tag"
            else run_nexus "$f" "$tag"; run_llama "$f" "$tag"; fi
            k=$((k + 1))
        done
    done
fi

cmd="THREADS=$THREADS PP=$PP TG=$TG DEPTH=$DEPTH REPS=$REPS${LLAMA_LIB:+ LLAMA_LIB=$LLAMA_LIB} bench/side_by_side.sh $MODELS"
/usr/bin/python3 - "$raw" "$OUT" "$THREADS" "$PP" "$TG" "$DEPTH" "$REPS" "$cmd" "$LABEL" $MODELS <<'EOF'
import json, os, statistics as st, sys
raw, out, threads, pp, tg, depth, reps, cmd, label = sys.argv[1:10]
models = sys.argv[10:]
pp, tg, depth, reps = int(pp), int(tg), int(depth), int(reps)

def nexus_json(p):
    with open(p) as fh:
        for line in fh:
            if line.strip().startswith("{"):
                return json.loads(line)
    raise SystemExit("side_by_side: no JSON in " + p)

tests = [("pp", 0), ("tg", 0), ("tg", depth), ("pp", depth)]
def name(kind, d):
    return (f"pp{pp}" if kind == "pp" else f"tg{tg}") + (f" @ d{d}" if d else "")

doc = {"threads": int(threads), "pp": pp, "tg": tg, "depth": depth, "reps": reps,
       "host": os.uname().nodename, "command": cmd, "label": label, "rows": [], "rounds": []}
fig = {}  # (model, kind, d, engine) -> [per-round t/s or None]
for m in models:
    b = os.path.basename(m)[:-5] if m.endswith(".gguf") else os.path.basename(m)
    for r in range(1, reps + 1):
        tag = f"{b}.r{r}"
        rd = {"model": b, "round": r}
        try:
            rd["load_before"] = open(f"{raw}/load.{tag}").read().split("load average:")[-1].strip()
        except OSError:
            pass
        ll = []
        try:
            ll = json.load(open(f"{raw}/llama.{tag}.json"))
        except (OSError, ValueError):
            pass
        for kind, d in tests:
            lt = [x["avg_ts"] for x in ll if x.get("n_depth", 0) == d and
                  ((x["n_prompt"] > 0 and x["n_gen"] == 0) if kind == "pp" else (x["n_gen"] > 0 and x["n_prompt"] == 0))]
            nv = None
            try:
                nv = nexus_json(f"{raw}/nexus.{tag}.d{d}.json")[kind + "_tps"]
            except (OSError, SystemExit, KeyError):
                pass
            lv = lt[0] if lt else None
            fig.setdefault((b, kind, d, "llama"), []).append(lv)
            fig.setdefault((b, kind, d, "nexus"), []).append(nv)
            rd[name(kind, d)] = {"llama_tps": lv, "nexus_tps": nv}
        doc["rounds"].append(rd)

def med(v):
    v = [x for x in v if x]
    return (st.median(v), min(v), max(v)) if v else (None, None, None)

lines = [f"Nexus against llama.cpp, {threads} threads" + (f", {label}" if label else "") +
         f"; medians of {reps} interleaved rounds (min-max):", "",
         "| model | test | llama.cpp t/s | Nexus t/s | Nexus / llama.cpp | paired ratio (min-max) |",
         "|---|---|---|---|---|---|"]
def f2(x):
    return "-" if x is None else f"{x:.2f}"
for m in models:
    b = os.path.basename(m)[:-5] if m.endswith(".gguf") else os.path.basename(m)
    for kind, d in tests:
        L, N = fig[(b, kind, d, "llama")], fig[(b, kind, d, "nexus")]
        lm, nm = med(L), med(N)
        pr = sorted(n / l for n, l in zip(N, L) if n and l)
        ratio = nm[0] / lm[0] if lm[0] and nm[0] else None
        row = {"model": b, "test": name(kind, d), "depth": d, "llama_tps": L, "nexus_tps": N,
               "llama_median": lm[0], "nexus_median": nm[0], "ratio": ratio, "paired": pr}
        doc["rows"].append(row)
        lines.append(f"| {b} | {name(kind, d)} | {f2(lm[0])} ({f2(lm[1])}-{f2(lm[2])}) | "
                     f"{f2(nm[0])} ({f2(nm[1])}-{f2(nm[2])}) | {f2(ratio)} | "
                     + (f"{st.median(pr):.2f} ({pr[0]:.2f}-{pr[-1]:.2f})" if pr else "-") + " |")
lines += ["", f"Decode at depth {depth} over decode at depth 0 (medians):", "",
          "| model | llama.cpp | Nexus |", "|---|---|---|"]
doc["depth_ratio"] = {}
for m in models:
    b = os.path.basename(m)[:-5] if m.endswith(".gguf") else os.path.basename(m)
    rr = {}
    for e in ("llama", "nexus"):
        a, z = med(fig[(b, "tg", depth, e)])[0], med(fig[(b, "tg", 0, e)])[0]
        rr[e] = a / z if a and z else None
    doc["depth_ratio"][b] = rr
    lines.append(f"| {b} | {f2(rr['llama'])} | {f2(rr['nexus'])} |")
lines += ["", "Load average before each round: " +
          "; ".join(f"{x['model']} r{x['round']}: {x.get('load_before', '?')}" for x in doc["rounds"]),
          "", "Command: `" + cmd + "`"]
md = "\n".join(lines) + "\n"
print(md)
os.makedirs(out, exist_ok=True)
for fn, text in (("side_by_side.json", json.dumps(doc, indent=1)), ("side_by_side.md", md)):
    p = os.path.join(out, fn)
    with open(p + ".tmp", "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(p + ".tmp", p)
print(f"(written: {out}/side_by_side.json, {out}/side_by_side.md)")
EOF
