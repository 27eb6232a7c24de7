#!/bin/sh
# Runs every test binary in $BUILD/tests, each in its own process with a time limit, and adds up
# the per-case results. A binary that crashes or times out counts as one failed case.
BUILD=${BUILD:-build}
LIMIT=${NX_TEST_TIMEOUT:-600}
passed=0; failed=0
for t in "$BUILD"/tests/test_*; do
    case "$t" in *.o|*.d) continue;; esac
    [ -x "$t" ] || continue
    name=$(basename "$t")
    out=$(timeout "$LIMIT" "$t" 2>&1); rc=$?
    echo "$out" | grep -v '^RESULT' | sed "s/^/[$name] /"
    res=$(echo "$out" | grep '^RESULT' | tail -n 1)
    if [ -n "$res" ]; then
        p=$(echo "$res" | sed 's/.*passed=\([0-9]*\).*/\1/')
        f=$(echo "$res" | sed 's/.*failed=\([0-9]*\).*/\1/')
        passed=$((passed + p)); failed=$((failed + f))
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then echo "[$name] exited with $rc"; failed=$((failed + 1)); fi
    else
        echo "[$name] CRASHED or timed out (exit $rc)"; failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
