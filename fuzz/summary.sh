#!/bin/sh
# fuzz/summary.sh - the README's fuzzing table from the logs of `make fuzz-run` (fuzz/run.sh):
# per target, executions, seconds, edges covered ("cov:"), features, corpus entries and size
# at the end of the run, and whether libFuzzer reported a finding.
printf '| target | executions | seconds | edges (cov) | features (ft) | corpus | result |\n'
printf '|---|---:|---:|---:|---:|---|---|\n'
for log in build-fuzz/logs/*.log; do
    name=$(basename "$log" .log)
    [ "$name" = queue ] && continue
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n 1)
    last=$(grep -E '^#[0-9]+' "$log" | grep 'cov:' | tail -n 1)
    cov=$(echo "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
    ft=$(echo "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
    corp=$(echo "$last" | sed -n 's/.* corp: \([^ ]*\).*/\1/p')
    if grep -qE '^==[0-9]+==ERROR|SUMMARY: (Address|Undefined|Leak)|ERROR: libFuzzer' "$log"; then res="finding"
    elif [ -n "$runs" ]; then res="clean"; else res="running"; fi
    printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$name" "${runs:-?}" "${secs:-?}" "${cov:-?}" \
        "${ft:-?}" "${corp:-?}" "$res"
done
