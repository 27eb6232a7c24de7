#!/bin/sh
# fuzz/run.sh NAME DICT MAX_LEN SECONDS RUNS - one long libFuzzer run of target NAME (nice 19,
# or $NICE; one process): corpus build-fuzz/corpus/NAME (seeded from build-fuzz/seeds/NAME), dictionary
# fuzz/dict/DICT.dict ("-": none), crashes in build-fuzz/crashes/NAME/, the log in
# build-fuzz/logs/NAME.log (an earlier run's log is kept as NAME.log.1, .2, ...: runs resume from
# the corpus, and fuzz/summary.sh adds them up); stops after RUNS executions or SECONDS,
# whichever comes first. A starved nice-19 fuzzer beside jobs of normal priority can hit
# libFuzzer's 25 s per-input timeout on inputs that run in a millisecond alone (ninth session):
# on a machine shared with other work, NICE=0 gives it its fair share.
name=$1; dict=$2; maxlen=$3; secs=${4:-3600}; runs=${5:-10000000}
bin=build-fuzz/bin/fuzz_$name
corpus=build-fuzz/corpus/$name
mkdir -p "$corpus" build-fuzz/crashes/"$name" build-fuzz/logs
log=build-fuzz/logs/$name.log
if [ -f "$log" ]; then k=1; while [ -f "$log.$k" ]; do k=$((k + 1)); done; mv "$log" "$log.$k"; fi
dopt=""; [ "$dict" != "-" ] && dopt="-dict=fuzz/dict/$dict.dict"
echo "fuzz $name: ${secs}s or $runs runs, log build-fuzz/logs/$name.log"
nice -n "${NICE:-19}" "$bin" $dopt -max_len="$maxlen" -max_total_time="$secs" -runs="$runs" -timeout=25 \
    -rss_limit_mb=2048 -malloc_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix=build-fuzz/crashes/"$name"/ "$corpus" build-fuzz/seeds/"$name" \
    > build-fuzz/logs/"$name".log 2>&1
rc=$?
tail -n 12 build-fuzz/logs/"$name".log | grep -E "stat::|Done|ERROR|SUMMARY" || true
exit $rc
