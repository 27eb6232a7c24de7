#!/bin/sh
# tests/fuzz_smoke.sh - a few seconds of every libFuzzer target (build-fuzz/bin/fuzz_*, from
# `make fuzz`) from its seeds, so CI keeps the targets building and running; any crash, hang,
# leak or sanitizer report fails the target. FUZZ_TABLE (name:dict:max_len ...) comes from the
# Makefile; FUZZ_SMOKE_SECS (default 1: about 2 s of wall time) per target, libFuzzer seed 1 (the same mutations each run). Prints "RESULT passed=N failed=M" for
# tests/run.sh. Corpora go to a temporary directory (the seeds are not changed).
secs=${FUZZ_SMOKE_SECS:-1}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nx_fuzz_smoke.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
for t in $FUZZ_TABLE; do
    name=${t%%:*}; rest=${t#*:}; dict=${rest%%:*}; maxlen=${rest#*:}
    bin=build-fuzz/bin/fuzz_$name
    if [ ! -x "$bin" ]; then echo "FAIL fuzz_$name: $bin missing"; failed=$((failed + 1)); continue; fi
    dopt=""; [ "$dict" != "-" ] && dopt="-dict=fuzz/dict/$dict.dict"
    mkdir -p "$tmp/$name"
    "$bin" $dopt -seed=1 -max_len="$maxlen" -max_total_time="$secs" -timeout=25 -rss_limit_mb=2048 \
        -artifact_prefix="$tmp/" "$tmp/$name" build-fuzz/seeds/"$name" > "$tmp/$name.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && grep -q "^Done" "$tmp/$name.log"; then
        echo "ok   fuzz_$name ($(grep '^Done' "$tmp/$name.log" | sed 's/Done //'))"
        passed=$((passed + 1))
    else
        echo "FAIL fuzz_$name (exit $rc):"; grep -E "ERROR|SUMMARY|runtime error" "$tmp/$name.log" | head -n 5
        failed=$((failed + 1))
    fi
done
echo "RESULT passed=$passed failed=$failed"
[ $failed -eq 0 ]
