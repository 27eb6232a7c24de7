#!/usr/bin/env bash
# parallel_side_by_side.sh - batched decode of N sequences (issue 11's figures): `nexus bench
# --parallel` against llama-batched-bench on the same GGUF file, interleaved in one run.
#
# Each repetition runs `nexus bench -p PP -n TG --parallel NPL` and `llama-batched-bench -npp PP
# -ntg TG -npl NPL` (and, with NEXUS_B set, a second Nexus binary, e.g. a build of main, for an
# A/B), alternating which goes first. Both prefill each sequence's PP-token prompt, then
# generate TG tokens per sequence, N tokens per step; "decode t/s" is aggregate (N x TG / time).
# Prints a table (medians over the repetitions; Nexus / llama.cpp; N / N=1; with NEXUS_B the
# per-repetition ratio A / B, median and range) and writes it with every raw figure as JSON.
# Timing runs are not niced; the load average is recorded before and after each repetition.
# About 3 minutes per repetition on a quiet 2-thread run of the 1B Q4_K_M file (+1 with NEXUS_B).
#
# Usage: bench/parallel_side_by_side.sh   (from the repository root, after `make`)
# Environment (defaults): NEXUS (./build/nexus), NEXUS_B (unset), MODEL
#   (/tmp/models/llama1b-q4km.gguf), THREADS (2), PP (512), TG (64), NPL (1,2,4,8), REPS (2),
#   LLAMA_BIN (/work/llama.cpp-build/bin), LLAMA_LIB (/work/llama.cpp-build-noamx:
#   /work/llama.cpp-build-noamx/bin: put first in llama-batched-bench's LD_LIBRARY_PATH, the
#   native build crashes in its AMX path), OUT (bench/results/parallel), TAG (the file name
#   stem; default parallel_<model>_p<PP>_n<TG>).
set -euo pipefail

NEXUS=${NEXUS:-./build/nexus}
NEXUS_B=${NEXUS_B:-}
MODEL=${MODEL:-/tmp/models/llama1b-q4km.gguf}
THREADS=${THREADS:-2}
PP=${PP:-512}
TG=${TG:-64}
NPL=${NPL:-1,2,4,8}
REPS=${REPS:-2}
LLAMA_BIN=${LLAMA_BIN:-/work/llama.cpp-build/bin}
LLAMA_LIB=${LLAMA_LIB-/work/llama.cpp-build-noamx:/work/llama.cpp-build-noamx/bin}
OUT=${OUT:-bench/results/parallel}
TAG=${TAG:-parallel_$(basename "$MODEL" .gguf)_p${PP}_n${TG}}

[ -f "$MODEL" ] || { echo "parallel_side_by_side: no model $MODEL" >&2; exit 1; }
[ -x "$NEXUS" ] || { echo "parallel_side_by_side: no $NEXUS (run make)" >&2; exit 1; }
[ -z "$NEXUS_B" ] || [ -x "$NEXUS_B" ] || { echo "parallel_side_by_side: no $NEXUS_B" >&2; exit 1; }
[ -x "$LLAMA_BIN/llama-batched-bench" ] || { echo "parallel_side_by_side: no $LLAMA_BIN/llama-batched-bench" >&2; exit 1; }
mkdir -p "$OUT"
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT

# the largest N's sequences must fit llama.cpp's context
max_n=$(echo "$NPL" | tr ',' '\n' | sort -n | tail -1)
ctx=$(( (PP + TG) * max_n + 64 ))

run_nexus() { # $1 binary, $2 output file
    "$1" bench -m "$MODEL" -t "$THREADS" -p "$PP" -n "$TG" -r 1 --parallel "$NPL" --json \
        > "$2" 2> "$2.log"
}
run_llama() {
    LD_LIBRARY_PATH="${LLAMA_LIB:+$LLAMA_LIB:}${LD_LIBRARY_PATH:-}" "$LLAMA_BIN/llama-batched-bench" \
        -m "$MODEL" -t "$THREADS" -tb "$THREADS" -c "$ctx" -b 2048 -ub 512 -npp "$PP" -ntg "$TG" \
        -npl "$NPL" --output-format jsonl > "$raw/llama.$1.jsonl" 2> "$raw/llama.$1.log"
}
for r in $(seq 1 "$REPS"); do
    uptime > "$raw/load_before.$r"
    echo "== repetition $r/$REPS" >&2
    if [ $((r % 2)) -eq 1 ]; then
        run_nexus "$NEXUS" "$raw/nexus.$r.jsonl"
        [ -z "$NEXUS_B" ] || run_nexus "$NEXUS_B" "$raw/nexus_b.$r.jsonl"
        run_llama "$r"
    else
        run_llama "$r"
        [ -z "$NEXUS_B" ] || run_nexus "$NEXUS_B" "$raw/nexus_b.$r.jsonl"
        run_nexus "$NEXUS" "$raw/nexus.$r.jsonl"
    fi
    uptime > "$raw/load_after.$r"
done

/usr/bin/python3 - "$raw" "$OUT/$TAG" "$REPS" "$MODEL" "$THREADS" "$PP" "$TG" "$NEXUS" "$NEXUS_B" <<'EOF'
import json, os, statistics, sys
raw, stem, reps, model, threads, pp, tg, nexus, nexus_b = sys.argv[1:10]
reps = int(reps)

def jsonl(path):
    out = []
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
    return out

def read(path):
    with open(path) as fh:
        return fh.read().strip()

runs = []
for r in range(1, reps + 1):
    nx = {d["parallel"]: d for d in jsonl(f"{raw}/nexus.{r}.jsonl")}
    nb = {d["parallel"]: d for d in jsonl(f"{raw}/nexus_b.{r}.jsonl")}
    ll = {d["pl"]: d for d in jsonl(f"{raw}/llama.{r}.jsonl") if "pl" in d}
    runs.append({"rep": r, "load_before": read(f"{raw}/load_before.{r}"),
                 "load_after": read(f"{raw}/load_after.{r}"),
                 "nexus": nx, "nexus_b": nb, "llama": ll})
ns = sorted(set().union(*[set(x["nexus"]) | set(x["llama"]) for x in runs]))

def med(v):
    return statistics.median(v) if v else None

rows = []
for n in ns:
    a = [x["nexus"][n]["decode_tps"] for x in runs if n in x["nexus"]]
    b = [x["nexus_b"][n]["decode_tps"] for x in runs if n in x["nexus_b"]]
    l = [x["llama"][n]["speed_tg"] for x in runs if n in x["llama"]]
    pa = [x["nexus"][n]["prefill_tps"] for x in runs if n in x["nexus"]]
    lp = [x["llama"][n]["speed_pp"] for x in runs if n in x["llama"]]
    ab = [x["nexus"][n]["decode_tps"] / x["nexus_b"][n]["decode_tps"] for x in runs
          if n in x["nexus"] and n in x["nexus_b"]]
    rows.append({"n": n, "nexus_decode_tps": med(a), "nexus_decode_all": a,
                 "llama_decode_tps": med(l), "llama_decode_all": l,
                 "nexus_prefill_tps": med(pa), "llama_prefill_tps": med(lp),
                 "nexus_b_decode_tps": med(b), "nexus_b_decode_all": b, "a_over_b_all": ab})
one = next((r for r in rows if r["n"] == 1), None)

def f(v, p=1):
    return "-" if v is None else f"{v:.{p}f}"

hdr = "| N | Nexus decode t/s | x N=1 | llama.cpp decode t/s | Nexus / llama.cpp | Nexus prefill t/s | llama.cpp prefill t/s |"
sep = "|--:|--:|--:|--:|--:|--:|--:|"
if nexus_b:
    hdr += " B decode t/s | A / B (median, range) |"
    sep += "--:|--:|"
lines = [hdr, sep]
for r in rows:
    x1 = r["nexus_decode_tps"] / one["nexus_decode_tps"] if one and one["nexus_decode_tps"] and r["nexus_decode_tps"] else None
    ratio = r["nexus_decode_tps"] / r["llama_decode_tps"] if r["nexus_decode_tps"] and r["llama_decode_tps"] else None
    s = (f"| {r['n']} | {f(r['nexus_decode_tps'])} | {f(x1, 2)} | {f(r['llama_decode_tps'])} | "
         f"{f(ratio, 2)} | {f(r['nexus_prefill_tps'])} | {f(r['llama_prefill_tps'])} |")
    if nexus_b:
        ab = r["a_over_b_all"]
        rng = f"{min(ab):.3f}..{max(ab):.3f}" if ab else "-"
        s += f" {f(r['nexus_b_decode_tps'])} | {f(med(ab), 3)} ({rng}) |"
    lines.append(s)
title = (f"{os.path.basename(model)}, {threads} threads, prompts of {pp}, {tg} generated tokens per "
         f"sequence, {reps} repetitions (medians); A = {nexus}" + (f", B = {nexus_b}" if nexus_b else ""))
table = title + "\n\n" + "\n".join(lines) + "\n"
print(table)
with open(stem + ".md", "w") as fh:
    fh.write(table)
doc = {"model": os.path.basename(model), "threads": int(threads), "pp": int(pp), "tg": int(tg),
       "reps": reps, "host": os.uname().nodename, "nexus": nexus, "nexus_b": nexus_b or None,
       "summary": rows,
       "runs": [{**x, "nexus": list(x["nexus"].values()), "nexus_b": list(x["nexus_b"].values()),
                 "llama": list(x["llama"].values())} for x in runs]}
with open(stem + ".json", "w") as fh:
    json.dump(doc, fh, indent=1)
print(f"wrote {stem}.md and {stem}.json")
EOF
