#!/bin/sh
# fuzz/summary.sh - the README's fuzzing table from the logs of `make fuzz-run` (fuzz/run.sh):
# per target, executions and seconds summed over its runs (NAME.log and the earlier NAME.log.N),
# edges covered ("cov:"), features and corpus entries/size at the end of the latest run, and
# whether any run reported a finding, and how many regression inputs tests/fuzz-regress/ keeps.
printf '| target | executions | seconds | edges (cov) | features (ft) | corpus (files/bytes) | libFuzzer reports | regression inputs kept |\n'
printf '|---|---:|---:|---:|---:|---|---|---:|\n'
for log in build-fuzz/logs/*.log; do
    name=$(basename "$log" .log)
    [ "$name" = queue ] && continue
    runs=$(cat "$log" "$log".* 2>/dev/null | sed -n 's/^stat::number_of_executed_units: *//p' |
           awk '{ s += $1 } END { if (NR) print s }')
    secs=$(cat "$log" "$log".* 2>/dev/null | sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' |
           awk '{ s += $1 } END { if (NR) print s }')
    last=$(grep -aE '^#[0-9]+' "$log" | grep -a 'cov:' | tail -n 1)
    cov=$(echo "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
    ft=$(echo "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
    corp=$(echo "$last" | sed -n 's/.* corp: \([^ ]*\).*/\1/p')
    kept=$(ls tests/fuzz-regress/"$name" 2>/dev/null | wc -l)
    if cat "$log" "$log".* 2>/dev/null | grep -aqE '^==[0-9]+==ERROR|SUMMARY: |ERROR: libFuzzer'; then res="finding"
    elif [ -n "$runs" ]; then res="clean"; else res="running"; fi
    printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$name" "${runs:-?}" "${secs:-?}" "${cov:-?}" \
        "${ft:-?}" "${corp:-?}" "$res" "$kept"
done
