#!/bin/sh
# train_dist_hang.sh MODE TRAIN [FLAGS...]: the watchdog (--dist-timeout 3)
# ends a two-rank run that would otherwise wait forever, within 20 s, with
# its line on stderr and a non-zero status:
#   torchrun  a torchrun-style world (no launcher to end the others) whose
#             rank 1 is killed (SIGKILL): rank 0 is left in a collective (or
#             Open MPI fails it, which ends the rank as well; a write to the
#             dead rank's socket must not end it silently with SIGPIPE);
#   mpirun    an mpirun world whose rank 1 is stopped (SIGSTOP, a hung rank):
#             rank 0's watchdog ends it, and mpirun then the stopped rank.
set -e
mode=$1
train=$2
shift 2
rm -rf hang-out-$mode hang-$mode-*.log
fail() {
    echo "train_dist_hang: $mode: $*" >&2
    kill -9 $main $victim 2>/dev/null || true
    cat hang-$mode-*.log >&2
    exit 1
}
if [ "$mode" = torchrun ]; then
    export WORLD_SIZE=2 MASTER_ADDR=localhost MASTER_PORT=29532
    RANK=1 LOCAL_RANK=1 "$train" "$@" --epochs 1000 --dist-timeout 3 --output hang-out-$mode \
        > hang-$mode-1.log 2>&1 &
    victim=$!
    RANK=0 LOCAL_RANK=0 "$train" "$@" --epochs 1000 --dist-timeout 3 --output hang-out-$mode \
        > hang-$mode-0.log 2>&1 &
    main=$!
else
    "$train" "$@" --nproc-per-node 2 --epochs 1000 --dist-timeout 3 --output hang-out-$mode > hang-$mode-0.log 2>&1 &
    main=$!
    victim=
fi
. "$(dirname "$0")/dist_helpers.sh"
wait_for_file hang-out-$mode/last.safetensors 1200 || fail "no checkpoint after 120 s"
# rank 0 ignores SIGPIPE: a write to the dead rank's socket would otherwise
# end it silently (under load, now and then), with no line to check below
rank0=$main
[ "$mode" = torchrun ] || rank0=$(rank_pid $main 0)
ignored=$(awk '/^SigIgn:/ { print $2 }' "/proc/$rank0/status" 2>/dev/null)
[ -n "$ignored" ] && [ $(((0x$ignored >> 12) & 1)) -eq 1 ] || fail "rank 0 does not ignore SIGPIPE (SigIgn: $ignored)"
if [ "$mode" = torchrun ]; then
    kill -9 $victim
    wait $victim 2>/dev/null || true
else
    victim=$(rank_pid $main 1)
    [ -n "$victim" ] || fail "rank 1 not found among the launcher's children"
    kill -STOP "$victim"
fi
wait_gone $main 200 || fail "still running 20 s after rank 1 was $([ $mode = torchrun ] && echo killed || echo stopped)"
rc=0
wait $main || rc=$?
[ $rc -ne 0 ] || fail "exit status 0"
# a stopped rank is caught by the watchdog alone; a killed one may also come
# back from Open MPI as a failed collective, which ends the rank at once
pattern='rank 0 of 2.: a collective has waited 3 s for the other ranks'
[ "$mode" = torchrun ] && pattern="$pattern|MPI_[A-Za-z]+ failed"
grep -qE "$pattern" hang-$mode-0.log || fail "no watchdog line (or failed collective) from rank 0"
echo "train_dist_hang: $mode: rank 0 ended $((waited / 10)).$((waited % 10)) s after rank 1 went, status $rc"
