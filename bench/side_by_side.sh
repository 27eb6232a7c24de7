#!/usr/bin/env bash
# side_by_side.sh - Nexus against llama.cpp on the same GGUF files, interleaved in one run.
#
# For each model file and each depth (0, then DEPTH) it runs llama-bench and `nexus bench` back
# to back (alternating which goes first), both with THREADS threads, pp PP and tg TG at that
# depth, REPS repetitions, and prints a table (t/s and the Nexus / llama.cpp ratio) and one
# JSON document with every figure. Timing runs are not niced; on a shared machine say so with
# the figures (the script records the load average before and after each model).
#
# Usage: bench/side_by_side.sh [MODEL.gguf ...]   (run from the repository root, after `make`)
# Environment (defaults): LLAMA_BIN (/work/llama.cpp-build/bin), LLAMA_LIB (unset: a directory put
#   first in llama-bench's LD_LIBRARY_PATH, e.g. a libggml-cpu.so built without AMX where the
#   native build's AMX path crashes), NEXUS (./build/nexus),
#   THREADS (2), PP (512), TG (128), DEPTH (4096), REPS (3), REPS_DEPTH (REPS), OUT (bench/results/side_by_side.json),
#   MODELS (/tmp/models/llama1b-q4km.gguf /tmp/models/llama1b-q8_0.gguf /tmp/models/llama1b-f16.gguf),
#   DEPTHS ("0 $DEPTH": the depths to run), RAW (a directory that keeps every tool's raw output;
#   default a temporary one). With RAW set, runs whose output is already there are skipped, so an
#   interrupted run resumes, and REPORT_ONLY=1 only builds the table and JSON from RAW.
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
REPS_DEPTH=${REPS_DEPTH:-$REPS} # repetitions of the depth runs (each llama-bench rep refills)
OUT=${OUT:-bench/results/side_by_side.json}
if [ $# -gt 0 ]; then MODELS="$*"; fi
MODELS=${MODELS:-/tmp/models/llama1b-q4km.gguf /tmp/models/llama1b-q8_0.gguf /tmp/models/llama1b-f16.gguf}

for f in $MODELS; do [ -f "$f" ] || { echo "side_by_side: no model $f" >&2; exit 1; }; done
[ -x "$LLAMA_BIN/llama-bench" ] || { echo "side_by_side: no $LLAMA_BIN/llama-bench" >&2; exit 1; }
[ -x "$NEXUS" ] || { echo "side_by_side: no $NEXUS (run make)" >&2; exit 1; }

DEPTHS=${DEPTHS:-0 $DEPTH}
if [ -n "${RAW:-}" ]; then
    tmp=$RAW
    mkdir -p "$tmp"
else
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
fi
i=0
for f in $MODELS; do
    for d in $DEPTHS; do
        [ "${REPORT_ONLY:-0}" = 1 ] && continue
        tag="$(basename "$f").$d"
        if [ -s "$tmp/llama.$tag.json" ] && [ -s "$tmp/nexus.$tag.json" ]; then continue; fi
        uptime > "$tmp/load_before.$tag"
        r=$REPS; [ "$d" = 0 ] || r=$REPS_DEPTH
        run_llama() {
            LD_LIBRARY_PATH="${LLAMA_LIB:+$LLAMA_LIB:}${LD_LIBRARY_PATH:-}" "$LLAMA_BIN/llama-bench" -m "$f" -t "$THREADS" -p "$PP" -n "$TG" -d "$d" -r "$r" -o json \
                > "$tmp/llama.$tag.json" 2> "$tmp/llama.$tag.log"
        }
        run_nexus() {
            "$NEXUS" bench -m "$f" -t "$THREADS" -p "$PP" -n "$TG" --depth "$d" -r "$r" --json \
                > "$tmp/nexus.$tag.json" 2> "$tmp/nexus.$tag.log"
        }
        echo "== $(basename "$f") depth $d" >&2
        if [ $((i % 2)) -eq 0 ]; then run_llama; run_nexus; else run_nexus; run_llama; fi
        uptime > "$tmp/load_after.$tag"
    done
    i=$((i + 1))
done

DEPTHS="$DEPTHS" python3 - "$tmp" "$OUT" "$THREADS" "$PP" "$TG" "$DEPTH" "$REPS/$REPS_DEPTH" $MODELS <<'EOF'
import json, os, sys
tmp, out, threads, pp, tg, depth, reps = sys.argv[1:8]
models = sys.argv[8:]
rows, doc = [], {"threads": int(threads), "pp": int(pp), "tg": int(tg), "depth": int(depth),
                 "reps": reps, "host": os.uname().nodename, "results": []}
def load_nexus(p):
    with open(p) as fh:
        for line in fh:
            line = line.strip()
            if line.startswith("{"):
                return json.loads(line)
    raise SystemExit("side_by_side: no JSON in " + p)
for i, m in enumerate(models):
    for d in [int(x) for x in os.environ["DEPTHS"].split()]:
        tag = f"{os.path.basename(m)}.{d}"
        if not (os.path.exists(f"{tmp}/llama.{tag}.json") and os.path.exists(f"{tmp}/nexus.{tag}.json")):
            continue
        try:
            ll = json.load(open(f"{tmp}/llama.{tag}.json"))
        except ValueError:
            continue
        nx = load_nexus(f"{tmp}/nexus.{tag}.json")
        load = open(f"{tmp}/load_before.{tag}").read().strip().split("load average:")[-1].strip()
        for kind in ("pp", "tg"):
            lt = [r for r in ll if (r["n_prompt"] > 0) == (kind == "pp") and (r["n_gen"] > 0) == (kind == "tg")]
            lts = lt[0]["avg_ts"] if lt else float("nan")
            lsd = lt[0].get("stddev_ts", 0.0) if lt else float("nan")
            nts = nx["pp_tps" if kind == "pp" else "tg_tps"]
            lo, hi = nx[f"{kind}_tps_min"], nx[f"{kind}_tps_max"]
            test = (f"pp{pp}" if kind == "pp" else f"tg{tg}") + (f" @ d{d}" if d else "")
            r = {"model": os.path.basename(m), "test": test, "depth": d, "llama_tps": lts,
                 "llama_sd": lsd, "nexus_tps": nts, "nexus_min": lo, "nexus_max": hi,
                 "ratio": nts / lts if lts else None, "load_before": load,
                 "nexus_kernels": nx.get("kernels"), "llama_build": lt[0].get("build_commit") if lt else None}
            doc["results"].append(r)
print(f"| model | test | llama.cpp t/s | Nexus t/s (min-max) | Nexus / llama.cpp | load avg before |")
print("|---|---|---|---|---|---|")
for r in doc["results"]:
    print(f"| {r['model']} | {r['test']} | {r['llama_tps']:.2f} ± {r['llama_sd']:.2f} | "
          f"{r['nexus_tps']:.2f} ({r['nexus_min']:.2f}-{r['nexus_max']:.2f}) | {r['ratio']:.2f} | {r['load_before']} |")
os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
tmpout = out + ".tmp"
with open(tmpout, "w") as fh:
    json.dump(doc, fh, indent=1)
    fh.flush()
    os.fsync(fh.fileno())
os.replace(tmpout, out)
print(f"(JSON: {out})")
EOF
