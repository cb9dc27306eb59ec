#!/bin/sh
# expect_fail.sh PATTERN CMD [ARGS...]: passes when CMD exits non-zero and its
# output (stdout and stderr) contains PATTERN (a grep -E expression).
pattern=$1
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -eq 0 ]; then
    echo "expect_fail: '$*' exited 0, expected a failure" >&2
    exit 1
fi
printf '%s\n' "$out" | grep -Eq -- "$pattern" || { echo "expect_fail: output lacks /$pattern/" >&2; exit 1; }
