#!/bin/sh
# train_dist_kill.sh TRAIN [FLAGS...]: one rank of a two-rank run killed
# (SIGKILL) after the first epoch's checkpoint ends the whole run with a
# non-zero status and the launcher's line naming the rank, within 30 s (no
# rank left waiting in a collective); --resume on last.safetensors then
# trains on with two ranks to the end (in kill-out-1: a new run's folder).
set -e
train=$1
shift
rm -rf kill-out kill-out-* kill.log kill-resume.log
"$train" "$@" --nproc-per-node 2 --epochs 1000 --output kill-out > kill.log 2>&1 &
launcher=$!
fail() {
    echo "train_dist_kill: $*" >&2
    kill -9 $launcher 2>/dev/null || true
    cat kill.log >&2
    exit 1
}
. "$(dirname "$0")/dist_helpers.sh"
wait_for_file kill-out/last.safetensors 1200 || fail "no checkpoint after 120 s"
victim=$(rank_pid $launcher 1)
[ -n "$victim" ] || fail "rank 1 not found among the launcher's children"
kill -9 "$victim"
wait_gone $launcher 300 || fail "still running 30 s after rank 1 died"
rc=0
wait $launcher || rc=$?
[ $rc -ne 0 ] || fail "exit status 0 after rank 1 died"
grep -q 'process rank 1 .*exited on signal 9' kill.log || fail "no line naming the dead rank"
echo "train_dist_kill: the run ended $((waited / 10)).$((waited % 10)) s after rank 1 was killed, status $rc"
last=$(tail -1 kill-out/summary.csv | cut -d, -f1)
"$train" "$@" --nproc-per-node 2 --epochs $((last + 2)) --output kill-out --resume kill-out/last.safetensors \
    > kill-resume.log
grep -q 'Resumed from kill-out/last.safetensors' kill-resume.log
grep -q "^$((last + 1)),"  kill-out-1/summary.csv
echo "train_dist_kill: resumed: $(grep '^Resumed' kill-resume.log)"
