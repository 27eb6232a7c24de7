#!/bin/bash
# bench/ab_depth.sh OLD_NEXUS NEW_NEXUS [MODEL] - two Nexus binaries alternated (ROUNDS rounds,
# order flipped each round): tg and pp at depth 0 and at depth DEPTH, one `nexus bench` per
# binary, depth and round. Prints one line per run (binary, depth, pp t/s, tg t/s) and the
# medians; raw JSON lines in $OUT (default bench/results/ab_depth).
# OLD_ENV / NEW_ENV: environment assignments for each side, so one binary can be compared with
# itself under two kernel sets: OLD_ENV=NX_KERNELS=avx2 bench/ab_depth.sh build/nexus build/nexus M
set -euo pipefail
OLD=$1 NEW=$2 M=${3:-/tmp/models/llama1b-q4km.gguf}
ROUNDS=${ROUNDS:-2} DEPTH=${DEPTH:-4096} PP=${PP:-512} TG=${TG:-64} T=${THREADS:-2}
OUT=${OUT:-bench/results/ab_depth}
mkdir -p "$OUT"
: > "$OUT/runs.jsonl"
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then order="old new"; else order="new old"; fi
    for d in 0 "$DEPTH"; do
        for w in $order; do
            bin=$OLD; envs=${OLD_ENV:-}
            if [ "$w" = new ]; then bin=$NEW; envs=${NEW_ENV:-}; fi
            # shellcheck disable=SC2086
            j=$(env $envs "$bin" bench -m "$M" -t "$T" -p "$PP" -n "$TG" --depth "$d" -r 1 --json --no-bandwidth 2>/dev/null | grep '^{')
            echo "{\"bin\":\"$w\",\"round\":$r,\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",\"run\":$j}" >> "$OUT/runs.jsonl"
            echo "$w d$d: $(echo "$j" | /usr/bin/python3 -c 'import json,sys; j=json.load(sys.stdin); print("pp %.1f tg %.1f" % (j["pp_tps"], j["tg_tps"]))')" >&2
        done
    done
done
/usr/bin/python3 - "$OUT/runs.jsonl" <<'PY'
import json, statistics as st, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
for w in ("old", "new"):
    for d in sorted({r["run"]["depth"] for r in runs}):
        x = [r["run"] for r in runs if r["bin"] == w and r["run"]["depth"] == d]
        print(f"{w} depth {d}: pp {st.median(v['pp_tps'] for v in x):.1f} tg {st.median(v['tg_tps'] for v in x):.1f} t/s ({len(x)} runs)")
PY
