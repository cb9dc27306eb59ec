#!/bin/sh
# expect_fail.sh PATTERN CMD [ARGS...]: passes when CMD exits non-zero and its
# output (stdout and stderr) contains PATTERN (a grep -E expression), and no
# sanitizer reported an error on the way out.
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
# a failure path must still be clean under the sanitizers
if printf '%s\n' "$out" | grep -Eq 'ERROR: (Address|Leak)Sanitizer|runtime error:'; then
    echo "expect_fail: the sanitizers reported an error" >&2
    exit 1
fi
